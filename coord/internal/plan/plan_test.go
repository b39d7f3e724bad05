package plan

import (
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/schema/schematest"
)

var (
	planGroup  = schema.Group{Prefix: "/keyshare", Name: "g"}
	planSchema = schema.Group{Prefix: planGroup.Prefix, Name: planGroup.Name}.Keys()
)

// evenSnapshot is one partition t/0 cut into n equal active ranges owned by
// m00..m(n-1), all registered, with ledger state.
func evenSnapshot(n int) *schema.Snapshot { return schematest.Even(planSchema, n) }

// TestPlanChangesFitOneTransaction: every change the planner makes fits in
// one etcd transaction (with the guard and the generation write apply adds),
// also when a crash splits one range into 64 pieces or a first round fills
// a partition with 65 ranges.
func TestPlanChangesFitOneTransaction(t *testing.T) {
	t.Parallel()
	parts := []assign.PartitionWeight{{TopicPartition: assign.TopicPartition{Topic: "t"}}}
	check := func(t *testing.T, snap *schema.Snapshot) {
		t.Helper()
		in := Input{Schema: planSchema, Snap: snap, Parts: parts, Now: time.Now(), DrainTimeout: time.Second, Gen: 2, MaxTxnOps: 128}
		changes := Plan(in)
		if len(changes) == 0 {
			t.Fatal("no change planned")
		}
		for _, c := range changes {
			if len(c.Writes)+1 > 128 || len(c.Guards)+1 > 128 {
				t.Errorf("change of %d writes and %d guards (with apply's guard and generation write: over etcd's 128): %.120s", len(c.Writes), len(c.Guards), c.What)
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
	parts := []assign.PartitionWeight{{TopicPartition: assign.TopicPartition{Topic: "t"}}}
	snapWith := func(since time.Time, drainMs int64) *schema.Snapshot {
		snap := &schema.Snapshot{Members: map[string]schema.Member{
			"a": {MemberInfo: schema.MemberInfo{V: 1, ID: "a", Weight: 1}, CreateRev: 1},
			"b": {MemberInfo: schema.MemberInfo{V: 1, ID: "b", Weight: 1}, CreateRev: 2},
		}, BadRanges: map[string]int64{}}
		for i, r := range []schema.RangeRecord{
			{V: 1, Topic: "t", Lo: 0, Hi: half, Owner: "a", State: schema.StateActive, Gen: 1, Since: since},
			{V: 1, Topic: "t", Lo: half, Hi: ledger.HashSpace, Owner: "a", State: schema.StateRevoking, Target: "b", Gen: 1, Since: since, DrainMs: drainMs},
		} {
			snap.Ranges = append(snap.Ranges, schema.RangeState{
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
	handsOff := func(snap *schema.Snapshot, after time.Duration) bool {
		in := Input{
			Schema: planSchema, Snap: snap, Parts: parts, Now: wall, DrainTimeout: 30 * time.Second, Gen: 2, MaxTxnOps: 128,
			Clock: seenAt.Add(after), Grace: grace,
			Seen: map[RangeObs]time.Time{{snap.Ranges[1].Key, snap.Ranges[1].Rev}: seenAt},
		}
		changes := Plan(in)
		for _, c := range changes {
			if strings.Contains(c.What, "hand off after drain timeout") {
				return true
			}
			t.Logf("other change: %s", c.What)
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
		in := Input{Schema: planSchema, Snap: snapWith(wall.Add(-time.Hour), 1000), Parts: parts, Now: wall,
			DrainTimeout: time.Second, Gen: 2, MaxTxnOps: 128, Clock: seenAt, Grace: grace}
		changes := Plan(in)
		for _, c := range changes {
			if strings.Contains(c.What, "hand off") {
				t.Fatalf("handed off a range never observed: %s", c.What)
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
	parts := []assign.PartitionWeight{{TopicPartition: assign.TopicPartition{Topic: "t"}}}
	check := func(t *testing.T, snap *schema.Snapshot) {
		t.Helper()
		for i := range snap.Ranges {
			snap.Ranges[i].Record.Reset = 42
		}
		changes := Plan(Input{Schema: planSchema, Snap: snap, Parts: parts, Now: time.Now(), DrainTimeout: time.Second, Gen: 2, MaxTxnOps: 128})
		if len(changes) == 0 {
			t.Fatal("no change planned")
		}
		records := 0
		for _, c := range changes {
			for _, w := range c.Writes {
				if w.Delete || !strings.HasPrefix(w.Key, planSchema.Ranges()) {
					continue
				}
				rec, err := schema.DecodeRange(planGroup, w.Key, []byte(w.Value), 0)
				if err != nil {
					t.Fatal(err)
				}
				records++
				if rec.Reset != 42 {
					t.Errorf("%s: %s %s written with reset epoch %d, want 42", c.What, rec.Range(), rec.State, rec.Reset)
				}
			}
		}
		if records == 0 {
			t.Fatal("no range record written")
		}
	}
	t.Run("a member joins", func(t *testing.T) {
		snap := evenSnapshot(2)
		snap.Members["m02"] = schema.Member{MemberInfo: schema.MemberInfo{V: 1, ID: "m02", Weight: 1}, CreateRev: 2}
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
