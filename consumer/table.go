package consumer

import (
	"time"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/ledger"
)

// The range table: the ranges a member works on, with their in-memory
// ledger state, and the pure functions over it.

// owned is a range this member works on, with its in-memory ledger state.
type owned struct {
	rs       coord.RangeState // the range record as last read (its Rev is the guard)
	st       *ledger.State
	flushed  uint64 // st.Version() last written to etcd
	dirty    bool   // never written since acquired
	revoking bool
	draining bool // a drainer goroutine is releasing it
	// drains counts the drains started; a drainer goes on only while it is
	// the latest and the range is still revoking.
	drains int
	// losses are records Kafka deleted before the range handled them, not
	// yet reported: the next flush writes them with the ledger entry.
	losses []coord.LossReport

	// Stuck detection (stuck.go).
	lastWM  int64
	wmSince time.Time
	stuck   bool
}

func (o *owned) tp() tp { return o.rs.TP() }

// containing returns the range of old that covers r on partition t.
func (p *pipeline) containing(old map[string]*owned, t tp, r ledger.HashRange) *owned {
	for _, w := range old {
		if w.tp() == t && w.st.Range().Intersect(r) == r {
			return w
		}
	}
	return nil
}

func ownsHash(ranges map[string]*owned, t tp, h uint32) bool {
	for _, w := range ranges {
		if w.tp() == t && w.st.Range().Contains(h) {
			return true
		}
	}
	return false
}

// drainBudget is how long the owner of revoking range rec may drain it: the
// leader's budget written in the record, else the member's own DrainTimeout
// (a record from a leader that does not write one).
func drainBudget(rec coord.RangeRecord, own time.Duration) time.Duration {
	if rec.DrainMs > 0 {
		return time.Duration(rec.DrainMs) * time.Millisecond
	}
	return own
}
