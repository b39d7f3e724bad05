package consumer

import (
	"fmt"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/coord"
)

// TestFencedLogLevels: fencing that a handoff causes is logged at debug
// level, fencing of a lost session or of a release still wanted at warn.
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
	for _, c := range []struct {
		name   string
		err    error
		wanted bool
		want   hclog.Level
	}{
		{"release: the leader took the revoke back", ranges, false, hclog.Debug},
		{"release: wrapped, taken back", fmt.Errorf("release: %w", ranges), false, hclog.Debug},
		{"release: still revoking here", ranges, true, hclog.Warn},
		{"release: the session guard failed", session, false, hclog.Warn},
		{"release: wrapped, the session guard failed", fmt.Errorf("release: %w", session), false, hclog.Warn},
	} {
		if got := releaseFencedLevel(c.err, c.wanted); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
