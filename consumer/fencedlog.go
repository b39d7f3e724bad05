package consumer

import (
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/coord"
)

// A member's etcd writes are fenced whenever the leader has moved on: it
// took a revoke back, revoked a range again, or handed it to its next owner
// while a flush was on its way. That is the handoff working, not news, so
// it is logged at debug level (a release so fenced waits for the member's
// view to show which it was: drain.go). What an operator should hear about
// is a write fenced for another reason: the member's session or
// registration is gone (every write refused until it joins again).

// flushFencedLevel is the level of a fenced ledger flush: warn when the
// member's session guard failed, debug when only some ranges' records
// moved on (the leader changed the assignment; the member rereads it).
func flushFencedLevel(f *coord.FencedError) hclog.Level {
	if f.Session {
		return hclog.Warn
	}
	return hclog.Debug
}
