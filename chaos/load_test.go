package chaos

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// The load-driven move row: one key carries 40% of the records, so the
// member whose range holds it is the busiest by far; the leader moves split
// points by the members' load reports (docs/load.md) while records flow.
// A load-driven move is a two-phase handoff like any other, so the row is
// graceful: no record may run twice, none out of order, and the old and the
// new owner of a key never run it at once.

// loadMoveLog is the leader's log line of a load-driven move.
const loadMoveLog = "moving split points by load"

var loadRows = []row{
	{name: "17 load-driven moves (one key 40% of records)", short: true, graceful: true, moves: true,
		hotShare: 0.4,
		// Reports every 500 ms and a 2 s cool-down, so that moves happen
		// within the row's few seconds of records (defaults: 5 s, 30 s);
		// the row's 400 records/s of up to 1 ms keep every member far
		// below the default --load-min-busy (0.5), so it is 0 here.
		memberArgs: []string{"--balance", "load", "--load-report-interval", "500ms", "--load-cooldown", "2s", "--load-min-busy", "0"},
		fault: func(e *env, _ bool, _ *rand.Rand) {
			deadline := time.Now().Add(20 * time.Second)
			for !loadMoved(e) {
				if time.Now().After(deadline) {
					e.t.Errorf("no load-driven move within 20 s (no %q in any member's log)", loadMoveLog)
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
			e.fault()
		}},
}

func init() { rows = append(rows, loadRows...) }

// loadMoved reports whether a member's log shows a load-driven move.
func loadMoved(e *env) bool {
	for _, id := range e.members() {
		if strings.Contains(e.memberLog(id), loadMoveLog) {
			return true
		}
	}
	return false
}

// TestLoadRowMovesOnlyOnSkew: the same workload balanced by width never
// logs a load-driven move, so row 17's check can fail (it is not satisfied
// by some other log line).
func TestLoadRowMovesOnlyOnSkew(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a group")
	}
	r := loadRows[0]
	r.name = "17w the same workload, --balance width"
	r.memberArgs = []string{"--balance", "width", "--load-report-interval", "500ms", "--load-cooldown", "2s", "--load-min-busy", "0"}
	r.moves = false
	r.fault = func(e *env, _ bool, _ *rand.Rand) {
		time.Sleep(6 * time.Second)
		if loadMoved(e) {
			e.t.Errorf("a load-driven move with --balance width")
		}
		e.fault()
	}
	runRow(t, r, false)
}
