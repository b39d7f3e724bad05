package coord

import "github.com/keyshare/keyshare/internal/plan"

// The leader's planner is package plan's: a pure function from a snapshot
// to changes as data (guards and writes). apply.go turns them into etcd
// transactions; these names keep the leader's loop as it reads.
type (
	change   = plan.Change
	rangeObs = plan.RangeObs
)
