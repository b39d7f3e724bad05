//go:build !race

package coord

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The model tests (the model is model_test.go's). They run one goroutine
// over an in-memory store, so the race detector has nothing to find in
// them and would only make them about six times slower, more than a minute
// of CI's time: `make test` runs them in a build without it, by the
// "Model" in their names (go test -run Model ./coord/), so a test added
// here needs it too.

func TestCoordModel(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		g := drawModelGroup(t, 2)
		for range rapid.IntRange(1, modelMaxMembers).Draw(t, "first members") {
			g.join(rapid.IntRange(1, 3).Draw(t, "weight"))
		}
		steps := rapid.IntRange(0, 8).Draw(t, "steps")
		for range steps {
			ids := g.ids()
			switch rapid.IntRange(0, 5).Draw(t, "step") {
			case 0:
				for range rapid.IntRange(1, 70).Draw(t, "joins") {
					if len(g.live) < modelMaxMembers {
						g.join(rapid.IntRange(1, 3).Draw(t, "weight"))
					}
				}
			case 1: // graceful leave
				if len(ids) > 0 {
					id := rapid.SampledFrom(ids).Draw(t, "leaver")
					g.leave(id)
				}
			case 2: // crash: the lease ends
				if len(ids) > 0 {
					id := rapid.SampledFrom(ids).Draw(t, "crash")
					g.crash(id)
				}
			case 3:
				g.damage()
			case 4:
				g.release(false)
			case 5:
				d := time.Duration(rapid.IntRange(0, 15).Draw(t, "seconds")) * time.Second
				g.clock, g.wall = g.clock.Add(d), g.wall.Add(d)
			}
			g.check("step")
			g.defrag = rapid.Bool().Draw(t, "still")
			g.round()
		}
		// Settle: no more disturbance except time, and owners that
		// sometimes release; a group needs at least one member.
		if len(g.live) == len(g.leaving) {
			g.join(1) // every live member is leaving
		}
		for i := 0; ; i++ {
			msg := g.settled()
			if msg == "" {
				break
			}
			if i == maxRounds {
				t.Fatalf("not settled after %d rounds: %s", maxRounds, msg)
			}
			g.release(false)
			g.round()
			g.clock, g.wall = g.clock.Add(5*time.Second), g.wall.Add(5*time.Second)
		}
	})
}

// TestModelSettlesFragments: after random joins, graceful leaves and crashes
// (owners releasing everything revoked), the leader's rounds settle the
// group with no range left to move or merge, and then every partition has at
// most one range more than it has owners (merge.go, assign/layout.go).
func TestModelSettlesFragments(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		g := drawModelGroup(t, 4)
		for range rapid.IntRange(1, 20).Draw(t, "first members") {
			g.join(1)
		}
		for range rapid.IntRange(0, 30).Draw(t, "steps") {
			ids := g.ids()
			switch rapid.IntRange(0, 3).Draw(t, "step") {
			case 0:
				if len(g.live) < 80 {
					g.join(1)
				}
			case 1: // graceful leave
				if len(ids) > 1 {
					id := rapid.SampledFrom(ids).Draw(t, "leaver")
					g.leave(id)
				}
			case 2: // crash
				if len(ids) > 1 {
					id := rapid.SampledFrom(ids).Draw(t, "crash")
					g.crash(id)
				}
			case 3:
				g.release(false)
			}
			g.defrag = rapid.Bool().Draw(t, "still")
			g.round()
			g.clock, g.wall = g.clock.Add(time.Second), g.wall.Add(time.Second)
		}
		if len(g.live) == len(g.leaving) {
			g.join(1)
		}
		g.defrag = true
		rounds := 0
		for ; ; rounds++ {
			if rounds == maxRounds {
				t.Fatalf("not settled after %d rounds: %s", maxRounds, g.settled())
			}
			g.release(true)
			n := g.round()
			g.clock, g.wall = g.clock.Add(time.Second), g.wall.Add(time.Second)
			if n == 0 && g.settled() == "" {
				break
			}
		}
		for tp, list := range g.store.snapshot().Partitions() {
			owners := map[string]bool{}
			for _, r := range list {
				owners[r.Record.Owner] = true
			}
			if len(list) > len(owners)+1 {
				t.Fatalf("%s/%d: %d ranges for %d owners after %d settling rounds", tp.Topic, tp.Partition, len(list), len(owners), rounds)
			}
		}
	})
}
