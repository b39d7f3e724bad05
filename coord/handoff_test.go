package coord

import (
	"testing"
	"time"

	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// handoffChanges plans snap with the leaving member's drain budget set and
// returns the plans written, by leaving member, with the changes that are
// not plans.
// leaving marks member id of snap as leaving with a drain budget and a lease.
// TestHandoffPlans: for a member leaving with a drain budget, the leader
// plans the next owner of each range that moves whole, and writes nothing
// else for it (the leaver gives its ranges up unasked); the plan is not
// written again while the stored one covers the leaver's ranges; it is when
// a member it names has gone; and a range cut between members, or a member
// leaving without a drain budget, gets no plan.
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
		plan := schema.HandoffPlan{V: recordVersion, Gen: 5, Members: map[string]int64{"m2": 1}}
		var rels []RangeRelease
		for i, r := range ranges {
			plan.Ranges = append(plan.Ranges, schema.PlannedHandoff{Key: r.Key, Rev: r.Rev, To: "m2"})
			rels = append(rels, RangeRelease{Range: r, Final: sampleEntry(i)})
		}
		plan.Ranges[0].Rev-- // planned at a revision the record has left
		resp, err := cli.Put(t.Context(), s.schema.Handoff(s.ID()), mustJSON(plan))
		if err != nil {
			t.Fatal(err)
		}
		h, err := schema.DecodeHandoff(s.schema.Handoff(s.ID()), []byte(mustJSON(plan)), resp.Header.Revision)
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
			want := schema.RangeRecord{Owner: s.ID(), State: schema.StateReleased}
			if handed(i) {
				want = schema.RangeRecord{Owner: "m2", State: schema.StateActive, Gen: 5}
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
