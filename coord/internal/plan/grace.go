package plan

import (
	"time"

	"github.com/keyshare/keyshare/schema"
)

// GoneTracker is the leader's side of the failover grace: it remembers, on
// the leader's own monotonic clock, when it first saw each range whose
// owner's registration is gone (state.Snapshot.OwnerOf), and keeps the range
// where it is until FailoverGrace has passed. Together with the member's
// conservative lease deadline (a member starts no record from DeadlineMargin
// before its lease may expire) it separates the old owner's last
// record start from the new owner's first by at least DeadlineMargin +
// FailoverGrace. A new leader starts with an empty tracker, so it waits the
// full grace from when it takes over: later, never earlier.
//
// It is keyed by range record (key and revision), which stands for the
// registration the record was written for, not by member id: a process
// that registers again under the same id, perhaps before the leader sees
// the gap, has a new registration, and the ranges of the old one still
// wait the grace meant for the handlers it may still run.
type GoneTracker struct {
	first map[RangeObs]time.Time
}

// Held returns the ranges that must wait (their registration gone for less
// than grace), and how long until the first of them may move (0 if none).
func (g *GoneTracker) Held(snap *schema.Snapshot, now time.Time, grace time.Duration) (map[RangeObs]bool, time.Duration) {
	if g.first == nil {
		g.first = map[RangeObs]time.Time{}
	}
	gone := map[RangeObs]bool{}
	for _, r := range snap.Ranges {
		if _, live := snap.OwnerOf(r); !live && r.Record.State != schema.StateReleased {
			gone[RangeObs{r.Key, r.Rev}] = true
		}
	}
	held, wait := map[RangeObs]bool{}, time.Duration(0)
	for o := range g.first {
		if !gone[o] {
			delete(g.first, o) // failed over, or deleted
		}
	}
	for o := range gone {
		at, ok := g.first[o]
		if !ok {
			at = now
			g.first[o] = now
		}
		if left := grace - now.Sub(at); left > 0 {
			held[o] = true
			if wait == 0 || left < wait {
				wait = left
			}
		}
	}
	return held, wait
}
