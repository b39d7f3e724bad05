package plan

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// handoffChanges plans snap with the leaving member's drain budget set and
// returns the plans written, by leaving member, with the changes that are
// not plans.
func handoffChanges(t *testing.T, snap *schema.Snapshot, parts []assign.PartitionWeight) (plans map[string]schema.HandoffPlan, others []Change) {
	t.Helper()
	in := Input{Schema: planSchema, Snap: snap, Parts: parts, Now: time.Now(), Clock: time.Now(), Seen: map[RangeObs]time.Time{},
		DrainTimeout: 10 * time.Second, Grace: time.Second, Gen: 7, MaxTxnOps: 128}
	plans = make(map[string]schema.HandoffPlan)
	for _, c := range Plan(in) {
		if !strings.HasPrefix(c.What, "plan the handoff") {
			others = append(others, c)
			continue
		}
		if len(c.Writes) != 1 {
			t.Fatalf("a plan change of %d writes, want one", len(c.Writes))
		}
		id := strings.TrimPrefix(c.Writes[0].Key, planSchema.Handoffs())
		from := snap.Members[id]
		wantGuards := []Guard{{Key: planSchema.Member(id), Rev: from.CreateRev, Created: true}, guardRev(planSchema.Handoff(id), from.Handoff.Rev)}
		if c.Writes[0].Delete || c.Writes[0].Lease != from.Lease || !slices.Equal(c.Guards, wantGuards) {
			t.Fatalf("a plan change of writes %+v guarded by %+v, want one put under %s's lease %d guarded by %+v (its registration and the plan's revision)", c.Writes, c.Guards, id, from.Lease, wantGuards)
		}
		key := c.Writes[0].Key
		h, err := schema.DecodeHandoff(key, []byte(c.Writes[0].Value), math.MaxInt64) // not written yet: any revision the plan names was read before
		if err != nil {
			t.Fatal(err)
		}
		plans[strings.TrimPrefix(key, planSchema.Handoffs())] = h.Plan
	}
	return plans, others
}

func leaving(snap *schema.Snapshot, id string) {
	m := snap.Members[id]
	m.Leaving, m.DrainMs, m.Lease = true, 10_000, 42
	snap.Members[id] = m
}

func TestHandoffPlans(t *testing.T) {
	t.Parallel()
	var parts []assign.PartitionWeight
	for p := range int32(4) {
		parts = append(parts, assign.PartitionWeight{TopicPartition: assign.TopicPartition{Topic: "t", Partition: p}})
	}
	// Four partitions, one range each: a and b own two each.
	snap := func() *schema.Snapshot {
		s := &schema.Snapshot{Members: make(map[string]schema.Member), BadRanges: map[string]int64{}, Rev: 20}
		for i, id := range []string{"a", "b", "c"} {
			s.Members[id] = schema.Member{MemberInfo: schema.MemberInfo{V: 1, ID: id, Weight: 1}, CreateRev: int64(i + 1), Lease: int64(i + 1)}
		}
		for p := range int32(4) {
			owner := []string{"a", "a", "b", "b"}[p]
			s.Ranges = append(s.Ranges, schema.RangeState{
				Key:       planSchema.Range("t", p, 0),
				Record:    schema.RangeRecord{V: 1, Topic: "t", Partition: p, Lo: 0, Hi: ledger.HashSpace, Owner: owner, State: schema.StateActive, Gen: 1},
				Rev:       int64(10 + p),
				LedgerKey: planSchema.LedgerEntry("t", p, 0),
				Entry:     ledger.Entry{Segments: []ledger.Segment{{Lo: 0, Hi: ledger.HashSpace, Next: 5}}},
				EntryRev:  int64(10 + p),
			})
		}
		return s
	}

	t.Run("a leaving member's ranges are planned, nothing else is written", func(t *testing.T) {
		s := snap()
		delete(s.Members, "c")
		leaving(s, "a")
		plans, others := handoffChanges(t, s, parts)
		if len(others) != 0 {
			t.Fatalf("changes besides the plan: %v", whats(others))
		}
		p, ok := plans["a"]
		if !ok || len(plans) != 1 {
			t.Fatalf("plans %v, want one for a", plans)
		}
		if p.Gen != 7 || len(p.Ranges) != 2 || p.Members["b"] != 2 {
			t.Fatalf("plan %+v: want generation 7, a's two ranges, b at its registration", p)
		}
		for _, r := range p.Ranges {
			rs := s.Ranges[0]
			if r.Key == s.Ranges[1].Key {
				rs = s.Ranges[1]
			}
			if r.Key != rs.Key || r.Rev != rs.Rev || r.To != "b" {
				t.Errorf("planned %+v, want %s at revision %d to b", r, rs.Key, rs.Rev)
			}
		}

		// Stored, it is not written again, also once a range has moved.
		m := s.Members["a"]
		m.Handoff = schema.StoredHandoff{Rev: 30, Plan: p, ByKey: map[string]schema.PlannedHandoff{p.Ranges[0].Key: p.Ranges[0], p.Ranges[1].Key: p.Ranges[1]}}
		s.Members["a"] = m
		if plans, _ := handoffChanges(t, s, parts); len(plans) != 0 {
			t.Fatalf("the stored plan was written again: %v", plans)
		}
		s.Ranges[0].Record.Owner, s.Ranges[0].Rev = "b", 31
		if plans, _ := handoffChanges(t, s, parts); len(plans) != 0 {
			t.Fatalf("the stored plan was written again after a handoff: %v", plans)
		}

		// b went, c came: a's range goes to c, in a new plan.
		delete(s.Members, "b")
		s.Members["c"] = schema.Member{MemberInfo: schema.MemberInfo{V: 1, ID: "c", Weight: 1}, CreateRev: 9, Lease: 9}
		plans, _ = handoffChanges(t, s, parts)
		if p := plans["a"]; len(p.Ranges) != 1 || p.Ranges[0].To != "c" || p.Members["c"] != 9 {
			t.Fatalf("after b went: plans %+v, want a's remaining range to c", plans)
		}
	})

	t.Run("a range cut between members is not planned", func(t *testing.T) {
		s := snap()
		leaving(s, "a")
		// One partition, a's: b and c share it, so a's range is cut.
		s.Ranges = s.Ranges[:1]
		plans, _ := handoffChanges(t, s, parts[:1])
		if len(plans["a"].Ranges) != 0 {
			t.Fatalf("plan %+v for ranges cut between b and c", plans["a"])
		}
	})

	t.Run("a planned range now cut between members leaves the plan", func(t *testing.T) {
		s := snap()
		leaving(s, "a")
		s.Ranges = s.Ranges[:1]
		// The plan sent a's range whole to d, which crashed; b and c now
		// share the partition.
		stale := schema.PlannedHandoff{Key: s.Ranges[0].Key, Rev: s.Ranges[0].Rev, To: "d"}
		m := s.Members["a"]
		m.Handoff = schema.StoredHandoff{Rev: 30, Plan: schema.HandoffPlan{V: 1, Gen: 6, Members: map[string]int64{"d": 8}, Ranges: []schema.PlannedHandoff{stale}},
			ByKey: map[string]schema.PlannedHandoff{stale.Key: stale}}
		s.Members["a"] = m
		plans, _ := handoffChanges(t, s, parts[:1])
		p, ok := plans["a"]
		if !ok || len(p.Ranges) != 0 {
			t.Fatalf("plans %+v: want a's plan written again without the range sent to the crashed d", plans)
		}
	})

	t.Run("a member leaving without a drain budget is revoked, not planned", func(t *testing.T) {
		s := snap()
		delete(s.Members, "c")
		m := s.Members["a"]
		m.Leaving = true
		s.Members["a"] = m
		plans, others := handoffChanges(t, s, parts)
		if len(plans) != 0 || len(others) != 2 {
			t.Fatalf("plans %v and changes %v, want a's two ranges revoked", plans, whats(others))
		}
	})
}

// whats lists the changes' descriptions.
func whats(changes []Change) []string {
	var out []string
	for _, c := range changes {
		out = append(out, c.What)
	}
	return out
}
