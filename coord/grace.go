package coord

import "time"

// goneTracker is the leader's side of issue 20: it remembers, on the
// leader's own monotonic clock, when it first saw each range owner without
// a session, and keeps that owner's ranges where they are until
// FailoverGrace has passed. Together with the member's conservative
// deadline (deadline.go) it separates the old owner's last record start
// from the new owner's first by at least DeadlineMargin + FailoverGrace.
// A new leader starts with an empty tracker, so it waits the full grace
// from when it takes over: later, never earlier.
type goneTracker struct {
	first map[string]time.Time
}

// held returns the owners whose ranges must wait (gone for less than
// grace), and how long until the first of them may move (0 if none).
func (g *goneTracker) held(snap *Snapshot, now time.Time, grace time.Duration) (map[string]bool, time.Duration) {
	if g.first == nil {
		g.first = map[string]time.Time{}
	}
	gone := map[string]bool{}
	for _, ranges := range snap.Partitions() {
		for _, r := range ranges {
			if _, alive := snap.Members[r.Record.Owner]; !alive {
				gone[r.Record.Owner] = true
			}
		}
	}
	held, wait := map[string]bool{}, time.Duration(0)
	for id := range g.first {
		if !gone[id] {
			delete(g.first, id) // back, or its ranges moved on
		}
	}
	for id := range gone {
		at, ok := g.first[id]
		if !ok {
			at = now
			g.first[id] = now
		}
		if left := grace - now.Sub(at); left > 0 {
			held[id] = true
			if wait == 0 || left < wait {
				wait = left
			}
		}
	}
	return held, wait
}
