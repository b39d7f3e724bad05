package chaos

import (
	"testing"
	"time"

	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// TestOverlapChecker feeds the overlap checker made-up histories: a clean
// handover, a zombie that starts a record after the new owner did, and an
// owner that legitimately gets its range back.
func TestOverlapChecker(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	g := func(ms int, owner string) grant {
		return grant{at: at(ms), rec: schema.RangeRecord{Topic: topic, Partition: 0, Lo: 0, Hi: ledger.HashSpace, Owner: owner}}
	}
	h := func(ms int, member string, off int64) handledLine {
		return handledLine{Member: member, Partition: 0, Offset: off, Key: "k", Start: at(ms), Time: at(ms + 1)}
	}
	for _, c := range []struct {
		name     string
		grants   []grant
		lines    []handledLine
		moves    int
		overlaps int
		min      time.Duration
	}{
		{"clean handover", []grant{g(0, "a"), g(1000, "b")},
			[]handledLine{h(10, "a", 0), h(500, "a", 1), h(1200, "b", 2)}, 1, 0, 700 * time.Millisecond},
		{"zombie keeps starting", []grant{g(0, "a"), g(1000, "b")},
			[]handledLine{h(10, "a", 0), h(1200, "b", 1), h(1500, "a", 2), h(1600, "b", 2)}, 1, 1, -300 * time.Millisecond},
		{"range comes back", []grant{g(0, "a"), g(1000, "b"), g(2000, "a")},
			[]handledLine{h(10, "a", 0), h(1200, "b", 1), h(2100, "a", 2)}, 2, 0, 900 * time.Millisecond},
		{"new owner a little before the test saw its grant", []grant{g(0, "a"), g(1000, "b")},
			[]handledLine{h(10, "a", 0), h(950, "b", 1)}, 1, 0, 940 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Grants without a state are failovers; see "handover" below.
			r := overlap(c.grants, nil, c.lines, nil)
			if r.Moves != c.moves || r.Overlaps != c.overlaps || r.Min != c.min || r.Failovers != c.moves {
				t.Errorf("got %+v, want %d moves, %d overlaps, min %s", r, c.moves, c.overlaps, c.min)
			}
		})
	}
	// A released range moving on is a handover, not a failover.
	rel := g(900, "a")
	rel.rec.State = schema.StateReleased
	r := overlap([]grant{g(0, "a"), rel, g(1000, "b")}, nil, []handledLine{h(10, "a", 0), h(1200, "b", 1)}, nil)
	if r.Moves != 1 || r.Failovers != 0 {
		t.Errorf("handover counted as failover: %+v", r)
	}
	// So is a range a leaving member wrote to its next owner by the
	// leader's plan; not one the plan names for another member, or at
	// another revision of the record.
	for _, c := range []struct {
		name     string
		plan     schema.PlannedHandoff
		failover int
	}{
		{"planned", schema.PlannedHandoff{Key: "r", Rev: 5, To: "b"}, 0},
		{"planned for another member", schema.PlannedHandoff{Key: "r", Rev: 5, To: "c"}, 1},
		{"planned at another revision", schema.PlannedHandoff{Key: "r", Rev: 4, To: "b"}, 1},
	} {
		first, next := g(0, "a"), g(1000, "b")
		first.key, first.rev = "r", 5
		next.key, next.rev, next.prevOwner, next.prevRev = "r", 9, "a", 5
		plans := []planSeen{{leaver: "a", rev: 7, byKey: map[string]schema.PlannedHandoff{"r": c.plan}}}
		r := overlap([]grant{first, next}, plans, []handledLine{h(10, "a", 0), h(1200, "b", 1)}, nil)
		if r.Moves != 1 || r.Failovers != c.failover {
			t.Errorf("%s: %+v, want %d failovers", c.name, r, c.failover)
		}
	}
}
