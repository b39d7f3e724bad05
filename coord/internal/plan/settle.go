package plan

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/schema"
)

// SettleTracker is the leader's side of defragmentation (merging a member's
// adjacent ranges, and the assignor's contiguous layout): it allows merges
// and the contiguous layout to start only once
// the group has been still for a while, on the leader's own monotonic
// clock. Still means: the same members (with the same weights and leaving
// flags) and partitions, and no round that moved hash space. During a
// rolling restart or a burst of joins the leader makes the least moves;
// the fragments are tidied once, after it. A new leader starts counting
// afresh.
type SettleTracker struct {
	shape string    // the members and partitions last seen
	since time.Time // when the group was last seen changing
}

// SettleDelay is how long the group must be still before it is
// defragmented: one session TTL (at least 1 s), the time the group takes
// to notice a crash, so that a crash followed by a restart is one change.
func SettleDelay(ttl time.Duration) time.Duration { return max(time.Second, ttl) }

// Ready reports whether defragmentation may start now, and otherwise how long
// until it may (if nothing changes meanwhile).
func (s *SettleTracker) Ready(snap *schema.Snapshot, parts []assign.PartitionWeight, now time.Time, delay time.Duration) (bool, time.Duration) {
	shape := GroupShape(snap, parts)
	if shape != s.shape || s.since.IsZero() {
		s.shape, s.since = shape, now
	}
	if left := delay - now.Sub(s.since); left > 0 {
		return false, left
	}
	return true, 0
}

// Moved notes a round that moved hash space (any change other than
// defragmentation's own).
func (s *SettleTracker) Moved(changes []Change, now time.Time) {
	for _, c := range changes {
		if !c.Defrag {
			s.since = now
			return
		}
	}
}

// GroupShape names the members (with their weights and leaving flags) and
// the partition count of snap: while it stays the same, the group is still.
func GroupShape(snap *schema.Snapshot, parts []assign.PartitionWeight) string {
	ids := make([]string, 0, len(snap.Members))
	for id, m := range snap.Members {
		ids = append(ids, fmt.Sprintf("%s/%d/%v", id, m.Weight, m.Leaving))
	}
	slices.Sort(ids)
	return fmt.Sprintf("%d %d;%s", len(parts), len(ids), strings.Join(ids, ","))
}
