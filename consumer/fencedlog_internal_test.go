package consumer

import (
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/coord"
)

// TestFencedLogLevels: fencing that a handoff causes is logged at debug
// level, fencing of a lost session at warn.
func TestFencedLogLevels(t *testing.T) {
	ranges := &coord.FencedError{Keys: []string{"r1"}}
	session := &coord.FencedError{Keys: []string{"r1", "r2"}, Session: true}
	for _, c := range []struct {
		name string
		f    *coord.FencedError
		want hclog.Level
	}{
		{"flush: a range's record moved on", ranges, hclog.Debug},
		{"flush: the session guard failed", session, hclog.Warn},
	} {
		if got := flushFencedLevel(c.f); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
