package coord

import (
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/coord/internal/plan"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

func TestPlanRevokeIgnoresOwnerFlush(t *testing.T) {
	t.Parallel()
	const half = ledger.HashSpace / 2
	parts := []assign.PartitionWeight{{TopicPartition: assign.TopicPartition{Topic: "t"}}}
	entry := func(lo, hi uint64, next int64) string {
		return string(ledger.Encode(ledger.Entry{Segments: []ledger.Segment{{Lo: lo, Hi: hi, Next: next}}}))
	}
	// flushThenApply plans on a group where a owns t/0 as the ranges cut at
	// bounds and b has just joined, lets a flush the range that moves, then
	// applies the planned change.
	flushThenApply := func(t *testing.T, bounds []uint64) (applied bool, what string) {
		t.Helper()
		s := newModelStore()
		for _, m := range []schema.MemberInfo{{ID: "a"}, {ID: "b"}} {
			m.V, m.Host, m.PID, m.Weight = recordVersion, "h", 1, 1
			s.lease++
			s.put(planSchema.Member(m.ID), mustJSON(m), s.lease)
		}
		for i := range len(bounds) - 1 {
			lo, hi := bounds[i], bounds[i+1]
			s.put(planSchema.Range("t", 0, lo), mustJSON(schema.RangeRecord{V: recordVersion, Topic: "t", Lo: lo, Hi: hi, Owner: "a", State: schema.StateActive, Gen: 1}), 0)
			s.put(planSchema.LedgerEntry("t", 0, lo), entry(lo, hi, 100), 0)
		}
		now := time.Now()
		changes := plan.Plan(plan.Input{Schema: planSchema, Snap: s.snapshot(), Parts: parts, Now: now, DrainTimeout: time.Second, Gen: 2, MaxTxnOps: 128,
			Clock: now, Seen: map[plan.RangeObs]time.Time{}, Grace: time.Second})
		if len(changes) != 1 {
			t.Fatalf("%d changes planned, want 1", len(changes))
		}
		// a flushes the range b takes (the last one) after the snapshot.
		moved := bounds[len(bounds)-2]
		s.put(planSchema.LedgerEntry("t", 0, moved), entry(moved, ledger.HashSpace, 101), 0)
		ok, err := s.apply(changes[0], 128)
		if err != nil {
			t.Fatal(err)
		}
		return ok, changes[0].What
	}
	t.Run("a whole range revoked", func(t *testing.T) {
		if ok, what := flushThenApply(t, []uint64{0, half, ledger.HashSpace}); !ok {
			t.Fatalf("%q failed on the owner's flush; want it written (it does not write the entry)", what)
		} else if !strings.HasPrefix(what, "revoke") {
			t.Fatalf("planned %q, want a revoke", what)
		}
	})
	t.Run("a split for a second member", func(t *testing.T) {
		if ok, what := flushThenApply(t, []uint64{0, ledger.HashSpace}); ok {
			t.Fatalf("%q written over the owner's flush; want it refused (it writes entries cut from the snapshot's)", what)
		}
	})
}

// TestPlanLeavingOwner: the leader writes no revoke for the active ranges
// of a leaving member, which drains and releases them unasked
// (Session.Leave); it hands each on once released, or once the member's own
// drain budget (from leaving/<id>, not the leader's DrainTimeout) plus
// the grace has passed on the leader's clock since it first saw the member
// leaving. A released range of an owner already gone is handed on without
// waiting for FailoverGrace: its owner said it was done. A leaving member
// that wrote no budget (one from before leaving/<id>) is revoked.
func TestPlanLeavingOwner(t *testing.T) {
	t.Parallel()
	parts := []assign.PartitionWeight{{TopicPartition: assign.TopicPartition{Topic: "t"}}}
	const grace = 2 * time.Second
	seenAt := time.Now()
	// a leaves; drainMs 0 is a member from before LeaveRecord.
	snapWith := func(st string, aAlive bool, drainMs int64) *schema.Snapshot {
		snap := &schema.Snapshot{Members: map[string]schema.Member{
			"b": {MemberInfo: schema.MemberInfo{V: 1, ID: "b", Weight: 1}, CreateRev: 2},
		}, BadRanges: map[string]int64{}}
		if aAlive {
			snap.Members["a"] = schema.Member{MemberInfo: schema.MemberInfo{V: 1, ID: "a", Weight: 1, Leaving: true}, CreateRev: 1, DrainMs: drainMs}
		}
		r := schema.RangeRecord{V: 1, Topic: "t", Hi: ledger.HashSpace, Owner: "a", State: st, Gen: 1}
		snap.Ranges = []schema.RangeState{{
			Key: planSchema.Range("t", 0, 0), Record: r, Rev: 10,
			LedgerKey: planSchema.LedgerEntry("t", 0, 0), EntryRev: 10,
			Entry: ledger.Entry{Segments: []ledger.Segment{{Hi: ledger.HashSpace, Next: 5}}},
		}}
		return snap
	}
	planned := func(snap *schema.Snapshot, after time.Duration, held map[plan.RangeObs]bool) string {
		seen := map[plan.RangeObs]time.Time{}
		plan.Observe(seen, snap, seenAt)
		changes := plan.Plan(plan.Input{
			Schema: planSchema, Snap: snap, Parts: parts, Now: time.Now(), DrainTimeout: 30 * time.Second, Gen: 2, MaxTxnOps: 128,
			Clock: seenAt.Add(after), Grace: grace, Seen: seen, Held: held,
		})
		var whats []string
		for _, c := range changes {
			whats = append(whats, c.What)
		}
		return strings.Join(whats, "; ")
	}
	tests := []struct {
		name    string
		state   string
		aAlive  bool
		drainMs int64
		after   time.Duration
		held    bool
		want    string // prefix of the one change, "" for none
	}{
		{"active, just seen leaving", schema.StateActive, true, 1000, 0, false, ""},
		{"active, grace not over", schema.StateActive, true, 1000, time.Second + grace - time.Millisecond, false, ""},
		{"active, the member's budget and grace over", schema.StateActive, true, 1000, time.Second + grace, false, "hand off after the leaving owner's drain timeout"},
		{"released", schema.StateReleased, true, 1000, 0, false, "hand off"},
		{"released, owner gone within FailoverGrace", schema.StateReleased, false, 0, 0, true, "hand off"},
		{"active, owner gone within FailoverGrace", schema.StateActive, false, 0, 0, true, ""},
		{"active, a leaver that wrote no budget (an older member) is revoked", schema.StateActive, true, 0, 0, false, "revoke"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := snapWith(tt.state, tt.aAlive, tt.drainMs)
			got := planned(snap, tt.after, map[plan.RangeObs]bool{{Key: snap.Ranges[0].Key, Rev: snap.Ranges[0].Rev}: tt.held})
			if tt.want == "" && got != "" || !strings.HasPrefix(got, tt.want) || tt.want != "revoke" && strings.Contains(got, "revoke") {
				t.Fatalf("planned %q, want %q", got, tt.want)
			}
			if tt.want != "" && !strings.Contains(got, "owner a") {
				t.Fatalf("planned %q, want a change of a's range", got)
			}
		})
	}
}
