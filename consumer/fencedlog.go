package consumer

import (
	"errors"

	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/coord"
)

// A member's etcd writes are fenced whenever the leader has moved on: it
// took a revoke back, revoked a range again, or handed it to its next owner
// while a flush was on its way. That is the handoff working, not news, so
// it is logged at debug level. What an operator should hear about is a
// write fenced for another reason: the member's session or registration is
// gone (every write refused until it joins again), or a release of a range
// the member still holds as revoking, which the leader has not taken back.

// flushFencedLevel is the level of a fenced ledger flush: warn when the
// member's session guard failed, debug when only some ranges' records
// moved on (the leader changed the assignment; the member rereads it).
func flushFencedLevel(f *coord.FencedError) hclog.Level {
	if f.Session {
		return hclog.Warn
	}
	return hclog.Debug
}

// releaseFencedLevel is the level of a fenced release err of a range that
// is still wanted (the member's latest assignment still has it revoking):
// debug when the leader took the revoke back or revoked it again, warn
// otherwise.
func releaseFencedLevel(err error, wanted bool) hclog.Level {
	var f *coord.FencedError
	if wanted || (errors.As(err, &f) && f.Session) {
		return hclog.Warn
	}
	return hclog.Debug
}
