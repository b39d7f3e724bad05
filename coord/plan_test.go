package coord

import (
	"fmt"
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
		changes, _ := plan(in)
		if len(changes) == 0 {
			t.Fatal("no change planned")
		}
		for _, c := range changes {
			if len(c.ops)+1 > 128 || len(c.cmps)+1 > 128 {
				t.Errorf("change of %d ops and %d compares (with apply's guard and generation write: over etcd's 128): %.120s", len(c.ops), len(c.cmps), c.what)
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
