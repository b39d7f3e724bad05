package coord

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/internal/keys"
	"github.com/keyshare/keyshare/ledger"
)

var planSchema = keys.New("/keyshare", "g")

// evenSnapshot is one partition t/0 cut into n equal active ranges owned by
// m00..m(n-1), all registered, with ledger state.
func evenSnapshot(n int) *Snapshot {
	snap := &Snapshot{Members: make(map[string]Member), BadRanges: map[string]int64{}}
	rev := int64(10)
	for i := range n {
		id := fmt.Sprintf("m%02d", i)
		snap.Members[id] = Member{MemberInfo: MemberInfo{V: 1, ID: id, Weight: 1}, CreateRev: 1}
		r := ledger.HashRange{Lo: ledger.HashSpace * uint64(i) / uint64(n), Hi: ledger.HashSpace * uint64(i+1) / uint64(n)}
		rev++
		snap.Ranges = append(snap.Ranges, RangeState{
			Key:       planSchema.Range("t", 0, r.Lo),
			Record:    RangeRecord{V: 1, Topic: "t", Lo: r.Lo, Hi: r.Hi, Owner: id, State: StateActive, Gen: 1},
			Rev:       rev,
			LedgerKey: planSchema.LedgerEntry("t", 0, r.Lo),
			Entry:     ledger.Entry{Segments: []ledger.Segment{{Lo: r.Lo, Hi: r.Hi, Next: 100}}},
			EntryRev:  rev,
		})
	}
	snap.Rev = rev
	return snap
}

// TestPlanChangesFitOneTransaction: every change the planner makes fits in
// one etcd transaction (with the guard and the generation write apply adds),
// also when a crash splits one range into 64 pieces or a first round fills
// a partition with 65 ranges.
func TestPlanChangesFitOneTransaction(t *testing.T) {
	t.Parallel()
	parts := []PartitionWeight{{TopicPartition: TopicPartition{Topic: "t"}}}
	check := func(t *testing.T, snap *Snapshot) {
		t.Helper()
		in := planInput{schema: planSchema, snap: snap, parts: parts, now: time.Now(), drainTimeout: time.Second, gen: 2, maxTxnOps: 128}
		changes := plan(in)
		if len(changes) == 0 {
			t.Fatal("no change planned")
		}
		for _, c := range changes {
			if len(c.writes)+1 > 128 || len(c.guards)+1 > 128 {
				t.Errorf("change of %d writes and %d guards (with apply's guard and generation write: over etcd's 128): %.120s", len(c.writes), len(c.guards), c.what)
			}
		}
	}
	t.Run("crash among 65", func(t *testing.T) {
		snap := evenSnapshot(65)
		delete(snap.Members, "m64")
		check(t, snap)
	})
	t.Run("first round of 65", func(t *testing.T) {
		snap := evenSnapshot(65)
		snap.Ranges = nil
		check(t, snap)
	})
}

// TestPlanDrainClock: the leader hands a revoking range on after the drain
// budget plus the grace period, measured on its own clock from when it first
// observed the revoking record, never from the wall-clock Since another
// machine (or an earlier leader) wrote.
func TestPlanDrainClock(t *testing.T) {
	t.Parallel()
	const half = ledger.HashSpace / 2
	parts := []PartitionWeight{{TopicPartition: TopicPartition{Topic: "t"}}}
	snapWith := func(since time.Time, drainMs int64) *Snapshot {
		snap := &Snapshot{Members: map[string]Member{
			"a": {MemberInfo: MemberInfo{V: 1, ID: "a", Weight: 1}, CreateRev: 1},
			"b": {MemberInfo: MemberInfo{V: 1, ID: "b", Weight: 1}, CreateRev: 2},
		}, BadRanges: map[string]int64{}}
		for i, r := range []RangeRecord{
			{V: 1, Topic: "t", Lo: 0, Hi: half, Owner: "a", State: StateActive, Gen: 1, Since: since},
			{V: 1, Topic: "t", Lo: half, Hi: ledger.HashSpace, Owner: "a", State: StateRevoking, Target: "b", Gen: 1, Since: since, DrainMs: drainMs},
		} {
			snap.Ranges = append(snap.Ranges, RangeState{
				Key: planSchema.Range("t", 0, r.Lo), Record: r, Rev: int64(10 + i),
				LedgerKey: planSchema.LedgerEntry("t", 0, r.Lo), EntryRev: int64(10 + i),
				Entry: ledger.Entry{Segments: []ledger.Segment{{Lo: r.Lo, Hi: r.Hi, Next: 5}}},
			})
		}
		return snap
	}
	wall := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	seenAt := time.Now() // the leader's monotonic clock
	const grace = 2 * time.Second
	handsOff := func(snap *Snapshot, after time.Duration) bool {
		in := planInput{
			schema: planSchema, snap: snap, parts: parts, now: wall, drainTimeout: 30 * time.Second, gen: 2, maxTxnOps: 128,
			clock: seenAt.Add(after), grace: grace,
			seen: map[rangeObs]time.Time{{snap.Ranges[1].Key, snap.Ranges[1].Rev}: seenAt},
		}
		changes := plan(in)
		for _, c := range changes {
			if strings.Contains(c.what, "hand off after drain timeout") {
				return true
			}
			t.Logf("other change: %s", c.what)
		}
		return false
	}
	tests := []struct {
		name    string
		since   time.Time
		drainMs int64
		after   time.Duration
		want    bool
	}{
		{"since long ago, just observed", wall.Add(-365 * 24 * time.Hour), 1000, 0, false},
		{"since long ago, budget not yet over", wall.Add(-365 * 24 * time.Hour), 1000, time.Second, false},
		{"since long ago, grace not yet over", wall.Add(-365 * 24 * time.Hour), 1000, time.Second + grace - time.Millisecond, false},
		{"since long ago, budget and grace over", wall.Add(-365 * 24 * time.Hour), 1000, time.Second + grace, true},
		{"since in the future, just observed", wall.Add(365 * 24 * time.Hour), 1000, 0, false},
		{"since in the future, budget and grace over", wall.Add(365 * 24 * time.Hour), 1000, time.Second + grace, true},
		{"no drain_ms: the leader's drain timeout", wall, 0, time.Second + grace, false},
		{"no drain_ms: the leader's drain timeout over", wall, 0, 30*time.Second + grace, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := handsOff(snapWith(tt.since, tt.drainMs), tt.after); got != tt.want {
				t.Fatalf("handed off %v after %s (since %s, drain_ms %d), want %v", got, tt.after, tt.since, tt.drainMs, tt.want)
			}
		})
	}
	t.Run("never observed counts as observed now", func(t *testing.T) {
		in := planInput{schema: planSchema, snap: snapWith(wall.Add(-time.Hour), 1000), parts: parts, now: wall,
			drainTimeout: time.Second, gen: 2, maxTxnOps: 128, clock: seenAt, grace: grace}
		changes := plan(in)
		for _, c := range changes {
			if strings.Contains(c.what, "hand off") {
				t.Fatalf("handed off a range never observed: %s", c.what)
			}
		}
	})
}

// TestPlanCarriesResetEpoch: the records the planner writes for a range an
// operator reset (a revoke when a member joins, and the parts of a crashed
// owner's range) keep its reset epoch, so that an owner that has not read
// the reset yet still sees the epoch grow and reloads (consumer/table.go).
func TestPlanCarriesResetEpoch(t *testing.T) {
	t.Parallel()
	parts := []PartitionWeight{{TopicPartition: TopicPartition{Topic: "t"}}}
	check := func(t *testing.T, snap *Snapshot) {
		t.Helper()
		for i := range snap.Ranges {
			snap.Ranges[i].Record.Reset = 42
		}
		changes := plan(planInput{schema: planSchema, snap: snap, parts: parts, now: time.Now(), drainTimeout: time.Second, gen: 2, maxTxnOps: 128})
		if len(changes) == 0 {
			t.Fatal("no change planned")
		}
		records := 0
		for _, c := range changes {
			for _, w := range c.writes {
				if w.del || !strings.HasPrefix(w.key, planSchema.Ranges()) {
					continue
				}
				rec, err := decodeRange(planSchema, w.key, []byte(w.value), 0)
				if err != nil {
					t.Fatal(err)
				}
				records++
				if rec.Reset != 42 {
					t.Errorf("%s: %s %s written with reset epoch %d, want 42", c.what, rec.Range(), rec.State, rec.Reset)
				}
			}
		}
		if records == 0 {
			t.Fatal("no range record written")
		}
	}
	t.Run("a member joins", func(t *testing.T) {
		snap := evenSnapshot(2)
		snap.Members["m02"] = Member{MemberInfo: MemberInfo{V: 1, ID: "m02", Weight: 1}, CreateRev: 2}
		check(t, snap)
	})
	t.Run("an owner crashed", func(t *testing.T) {
		snap := evenSnapshot(3)
		delete(snap.Members, "m02")
		check(t, snap)
	})
}

// TestPlanRevokeIgnoresOwnerFlush: a whole range revoked from its owner is
// written even when the owner flushed its ledger entry after the leader's
// snapshot (the revoke leaves the entry alone, and the owner's flushes are
// fenced by the range record); a split, which writes entries cut from the
// snapshot's, waits for the next round.
func TestPlanRevokeIgnoresOwnerFlush(t *testing.T) {
	t.Parallel()
	const half = ledger.HashSpace / 2
	parts := []PartitionWeight{{TopicPartition: TopicPartition{Topic: "t"}}}
	entry := func(lo, hi uint64, next int64) string {
		return string(ledger.Encode(ledger.Entry{Segments: []ledger.Segment{{Lo: lo, Hi: hi, Next: next}}}))
	}
	// flushThenApply plans on a group where a owns t/0 as the ranges cut at
	// bounds and b has just joined, lets a flush the range that moves, then
	// applies the planned change.
	flushThenApply := func(t *testing.T, bounds []uint64) (applied bool, what string) {
		t.Helper()
		s := newModelStore()
		for _, m := range []MemberInfo{{ID: "a"}, {ID: "b"}} {
			m.V, m.Host, m.PID, m.Weight = recordVersion, "h", 1, 1
			s.lease++
			s.put(planSchema.Member(m.ID), mustJSON(m), s.lease)
		}
		for i := range len(bounds) - 1 {
			lo, hi := bounds[i], bounds[i+1]
			s.put(planSchema.Range("t", 0, lo), mustJSON(RangeRecord{V: recordVersion, Topic: "t", Lo: lo, Hi: hi, Owner: "a", State: StateActive, Gen: 1}), 0)
			s.put(planSchema.LedgerEntry("t", 0, lo), entry(lo, hi, 100), 0)
		}
		now := time.Now()
		changes := plan(planInput{schema: planSchema, snap: s.snapshot(), parts: parts, now: now, drainTimeout: time.Second, gen: 2, maxTxnOps: 128,
			clock: now, seen: map[rangeObs]time.Time{}, grace: time.Second})
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
		return ok, changes[0].what
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
	parts := []PartitionWeight{{TopicPartition: TopicPartition{Topic: "t"}}}
	const grace = 2 * time.Second
	seenAt := time.Now()
	// a leaves; drainMs 0 is a member from before LeaveRecord.
	snapWith := func(state string, aAlive bool, drainMs int64) *Snapshot {
		snap := &Snapshot{Members: map[string]Member{
			"b": {MemberInfo: MemberInfo{V: 1, ID: "b", Weight: 1}, CreateRev: 2},
		}, BadRanges: map[string]int64{}}
		if aAlive {
			snap.Members["a"] = Member{MemberInfo: MemberInfo{V: 1, ID: "a", Weight: 1, Leaving: true}, CreateRev: 1, DrainMs: drainMs}
		}
		r := RangeRecord{V: 1, Topic: "t", Hi: ledger.HashSpace, Owner: "a", State: state, Gen: 1}
		snap.Ranges = []RangeState{{
			Key: planSchema.Range("t", 0, 0), Record: r, Rev: 10,
			LedgerKey: planSchema.LedgerEntry("t", 0, 0), EntryRev: 10,
			Entry: ledger.Entry{Segments: []ledger.Segment{{Hi: ledger.HashSpace, Next: 5}}},
		}}
		return snap
	}
	planned := func(snap *Snapshot, after time.Duration, held map[rangeObs]bool) string {
		seen := map[rangeObs]time.Time{}
		observe(seen, snap, seenAt)
		changes := plan(planInput{
			schema: planSchema, snap: snap, parts: parts, now: time.Now(), drainTimeout: 30 * time.Second, gen: 2, maxTxnOps: 128,
			clock: seenAt.Add(after), grace: grace, seen: seen, held: held,
		})
		var whats []string
		for _, c := range changes {
			whats = append(whats, c.what)
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
		{"active, just seen leaving", StateActive, true, 1000, 0, false, ""},
		{"active, grace not over", StateActive, true, 1000, time.Second + grace - time.Millisecond, false, ""},
		{"active, the member's budget and grace over", StateActive, true, 1000, time.Second + grace, false, "hand off after the leaving owner's drain timeout"},
		{"released", StateReleased, true, 1000, 0, false, "hand off"},
		{"released, owner gone within FailoverGrace", StateReleased, false, 0, 0, true, "hand off"},
		{"active, owner gone within FailoverGrace", StateActive, false, 0, 0, true, ""},
		{"active, a leaver that wrote no budget (an older member) is revoked", StateActive, true, 0, 0, false, "revoke"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := snapWith(tt.state, tt.aAlive, tt.drainMs)
			got := planned(snap, tt.after, map[rangeObs]bool{{snap.Ranges[0].Key, snap.Ranges[0].Rev}: tt.held})
			if tt.want == "" && got != "" || !strings.HasPrefix(got, tt.want) || tt.want != "revoke" && strings.Contains(got, "revoke") {
				t.Fatalf("planned %q, want %q", got, tt.want)
			}
			if tt.want != "" && !strings.Contains(got, "owner a") {
				t.Fatalf("planned %q, want a change of a's range", got)
			}
		})
	}
}
