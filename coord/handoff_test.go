package coord

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/state"
	"github.com/keyshare/keyshare/testutil"
)

// handoffChanges plans snap with the leaving member's drain budget set and
// returns the plans written, by leaving member, with the changes that are
// not plans.
func handoffChanges(t *testing.T, snap *Snapshot, parts []PartitionWeight) (plans map[string]HandoffPlan, others []change) {
	t.Helper()
	in := planInput{schema: planSchema, snap: snap, parts: parts, now: time.Now(), clock: time.Now(), seen: map[rangeObs]time.Time{},
		drainTimeout: 10 * time.Second, grace: time.Second, gen: 7, maxTxnOps: 128}
	plans = make(map[string]HandoffPlan)
	for _, c := range plan(in) {
		if !strings.HasPrefix(c.what, "plan the handoff") {
			others = append(others, c)
			continue
		}
		if len(c.writes) != 1 {
			t.Fatalf("a plan change of %d writes, want one", len(c.writes))
		}
		id := strings.TrimPrefix(c.writes[0].key, planSchema.Handoffs())
		from := snap.Members[id]
		wantGuards := []keyGuard{{key: planSchema.Member(id), rev: from.CreateRev, created: true}, guardRev(planSchema.Handoff(id), from.Handoff.Rev)}
		if c.writes[0].del || c.writes[0].lease != from.Lease || !slices.Equal(c.guards, wantGuards) {
			t.Fatalf("a plan change of writes %+v guarded by %+v, want one put under %s's lease %d guarded by %+v (its registration and the plan's revision)", c.writes, c.guards, id, from.Lease, wantGuards)
		}
		key := c.writes[0].key
		h, err := state.DecodeHandoff(key, []byte(c.writes[0].value), math.MaxInt64) // not written yet: any revision the plan names was read before
		if err != nil {
			t.Fatal(err)
		}
		plans[strings.TrimPrefix(key, planSchema.Handoffs())] = h.Plan
	}
	return plans, others
}

// leaving marks member id of snap as leaving with a drain budget and a lease.
func leaving(snap *Snapshot, id string) {
	m := snap.Members[id]
	m.Leaving, m.DrainMs, m.Lease = true, 10_000, 42
	snap.Members[id] = m
}

// TestHandoffPlans: for a member leaving with a drain budget, the leader
// plans the next owner of each range that moves whole, and writes nothing
// else for it (the leaver gives its ranges up unasked); the plan is not
// written again while the stored one covers the leaver's ranges; it is when
// a member it names has gone; and a range cut between members, or a member
// leaving without a drain budget, gets no plan.
func TestHandoffPlans(t *testing.T) {
	t.Parallel()
	var parts []PartitionWeight
	for p := range int32(4) {
		parts = append(parts, PartitionWeight{TopicPartition: TopicPartition{Topic: "t", Partition: p}})
	}
	// Four partitions, one range each: a and b own two each.
	snap := func() *Snapshot {
		s := &Snapshot{Members: make(map[string]Member), BadRanges: map[string]int64{}, Rev: 20}
		for i, id := range []string{"a", "b", "c"} {
			s.Members[id] = Member{MemberInfo: MemberInfo{V: 1, ID: id, Weight: 1}, CreateRev: int64(i + 1), Lease: int64(i + 1)}
		}
		for p := range int32(4) {
			owner := []string{"a", "a", "b", "b"}[p]
			s.Ranges = append(s.Ranges, RangeState{
				Key:       planSchema.Range("t", p, 0),
				Record:    RangeRecord{V: 1, Topic: "t", Partition: p, Lo: 0, Hi: ledger.HashSpace, Owner: owner, State: StateActive, Gen: 1},
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
		m.Handoff = storedHandoff{Rev: 30, Plan: p, ByKey: map[string]PlannedHandoff{p.Ranges[0].Key: p.Ranges[0], p.Ranges[1].Key: p.Ranges[1]}}
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
		s.Members["c"] = Member{MemberInfo: MemberInfo{V: 1, ID: "c", Weight: 1}, CreateRev: 9, Lease: 9}
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
		stale := PlannedHandoff{Key: s.Ranges[0].Key, Rev: s.Ranges[0].Rev, To: "d"}
		m := s.Members["a"]
		m.Handoff = storedHandoff{Rev: 30, Plan: HandoffPlan{V: 1, Gen: 6, Members: map[string]int64{"d": 8}, Ranges: []PlannedHandoff{stale}},
			ByKey: map[string]PlannedHandoff{stale.Key: stale}}
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

// TestDecodeHandoff: a plan that names a member outside its members, or a
// revision that cannot be a record's, is damaged; the stored plan keeps its
// revision (so the leader can replace it) and no range.
func TestDecodeHandoff(t *testing.T) {
	t.Parallel()
	key := planSchema.Handoff("a")
	for _, v := range []string{
		`{"v":1,"gen":3,"members":{"b":2},"ranges":[{"key":"k","rev":5,"to":"c"}]}`,
		`{"v":1,"gen":3,"members":{"b":2},"ranges":[{"key":"k","rev":0,"to":"b"}]}`,
		`{"v":1,"gen":3,"members":{"b":2},"ranges":[],"extra":1}`,
		`{"v":1,"gen":3,"members":{"b":2},"ranges":[{"key":"k","rev":13,"to":"b"}]}`,                  // planned after it was written
		`{"v":1,"gen":3,"members":{"b":9223372036854775807},"ranges":[{"key":"k","rev":5,"to":"b"}]}`, // registered after it
		`{"v":1,"gen":3,"members":{"b/c":2},"ranges":[{"key":"k","rev":5,"to":"b/c"}]}`,               // no member id
		`{"v":1,"gen":9223372036854775807,"members":{"b":2},"ranges":[{"key":"k","rev":5,"to":"b"}]}`,
	} {
		h, err := state.DecodeHandoff(key, []byte(v), 12)
		if err == nil || h.Rev != 12 || len(h.ByKey) != 0 {
			t.Errorf("%s: stored %+v, error %v; want an error, revision 12 and no range", v, h, err)
		}
	}
	h, err := state.DecodeHandoff(key, []byte(`{"v":1,"gen":3,"members":{"b":2},"ranges":[{"key":"k","rev":5,"to":"b"}]}`), 12)
	if err != nil || h.ByKey["k"] != (PlannedHandoff{Key: "k", Rev: 5, To: "b"}) {
		t.Fatalf("stored %+v, error %v", h, err)
	}
}

// TestHandOffOrRelease: a leaving member with the leader's plan writes each
// planned range active for its next owner, with its final entry, in the
// transaction that would have released it; a range the plan names at
// another revision, and every range once the plan has been rewritten since
// it was read, is released to the leader instead.
func TestHandOffOrRelease(t *testing.T) {
	_, e := testutil.StartEtcd(t)
	cli, counts := countingClient(t, e.Endpoints)
	setup := func(t *testing.T, group string, n int) (*Session, []RangeRelease, int64) {
		s := bareSession(t, cli, group, DefaultMaxTxnOps)
		ranges := revokedRanges(t, s, n)
		plan := HandoffPlan{V: recordVersion, Gen: 5, Members: map[string]int64{"m2": 1}}
		var rels []RangeRelease
		for i, r := range ranges {
			plan.Ranges = append(plan.Ranges, PlannedHandoff{Key: r.Key, Rev: r.Rev, To: "m2"})
			rels = append(rels, RangeRelease{Range: r, Final: sampleEntry(i)})
		}
		plan.Ranges[0].Rev-- // planned at a revision the record has left
		resp, err := cli.Put(t.Context(), s.schema.Handoff(s.ID()), mustJSON(plan))
		if err != nil {
			t.Fatal(err)
		}
		h, err := state.DecodeHandoff(s.schema.Handoff(s.ID()), []byte(mustJSON(plan)), resp.Header.Revision)
		if err != nil {
			t.Fatal(err)
		}
		s.mu.leavingAt, s.mu.handoff, s.mu.handoffSeen = time.Now(), h, true
		return s, rels, resp.Header.Revision
	}
	check := func(t *testing.T, s *Session, rels []RangeRelease, handed func(i int) bool) {
		t.Helper()
		recs := dump(t, cli, s.schema.Ranges())
		for i, rl := range rels {
			rec, err := decodeRange(s.schema, rl.Range.Key, []byte(recs[rl.Range.Key].value), 0)
			if err != nil {
				t.Fatal(err)
			}
			want := RangeRecord{Owner: s.ID(), State: StateReleased}
			if handed(i) {
				want = RangeRecord{Owner: "m2", State: StateActive, Gen: 5}
			}
			if rec.Owner != want.Owner || rec.State != want.State || handed(i) && (rec.Target != "" || rec.DrainMs != 0 || rec.Gen != 5) {
				t.Errorf("%s: %s for %s (generation %d, target %q, drain %d); want %s for %s", rl.Range.Key, rec.State, rec.Owner, rec.Gen, rec.Target, rec.DrainMs, want.State, want.Owner)
			}
			mustEqual(t, "final entry of "+rl.Range.Key, readEntry(t, cli, rl.Range.LedgerKey, ledger.Full), rl.Final)
		}
	}

	t.Run("planned ranges are handed off in as many transactions as a release", func(t *testing.T) {
		s, rels, _ := setup(t, "planned", 200)
		before := counts.get("/etcdserverpb.KV/Txn")
		if err := s.releaseRanges(t.Context(), rels); err != nil {
			t.Fatal(err)
		}
		// 199 planned ranges, two operations each (record and entry), 64
		// to a transaction; then the one the plan names at an older
		// revision, released.
		if got := counts.get("/etcdserverpb.KV/Txn") - before; got != 5 {
			t.Errorf("%d transactions, want 4 handoffs and 1 release", got)
		}
		check(t, s, rels, func(i int) bool { return i > 0 })
	})

	t.Run("a plan rewritten since it was read is not used", func(t *testing.T) {
		s, rels, _ := setup(t, "rewritten", 20)
		if _, err := cli.Put(t.Context(), s.schema.Handoff(s.ID()), `{"v":1,"gen":6,"members":{},"ranges":[]}`); err != nil {
			t.Fatal(err)
		}
		if err := s.releaseRanges(t.Context(), rels); err != nil {
			t.Fatal(err)
		}
		check(t, s, rels, func(int) bool { return false })
	})
}
