package coord

import (
	"time"

	"github.com/keyshare/keyshare/internal/plan"
)

// The leader's planner is package plan's: a pure function from a snapshot
// to changes as data (guards and writes). apply.go turns them into etcd
// transactions; these names keep the leader's loop as it reads.
type (
	change   = plan.Change
	rangeObs = plan.RangeObs
)

// settleTracker is the leader's plan.SettleTracker.
type settleTracker struct{ t plan.SettleTracker }

func (s *settleTracker) ready(snap *Snapshot, parts []PartitionWeight, now time.Time, delay time.Duration) (bool, time.Duration) {
	return s.t.Ready(snap, parts, now, delay)
}

func (s *settleTracker) moved(changes []change, now time.Time) { s.t.Moved(changes, now) }

// settleDelay is plan.SettleDelay.
func settleDelay(ttl time.Duration) time.Duration { return plan.SettleDelay(ttl) }

// goneTracker is the leader's plan.GoneTracker.
type goneTracker struct{ t plan.GoneTracker }

func (g *goneTracker) held(snap *Snapshot, now time.Time, grace time.Duration) (map[rangeObs]bool, time.Duration) {
	return g.t.Held(snap, now, grace)
}
