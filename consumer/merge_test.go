package consumer_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// TestMergeRunsNothingTwice: members join one partition one by
// one while records flow. The third join fragments the shares; once the
// group is still the leader lays them out contiguously and merges the
// newcomer's two adjacent ranges (revoking them to it, then joining the
// released ranges and their ledger entries), while records keep coming.
// Nothing is lost, nothing runs twice, per-key order holds, and the
// partition ends with one range per owner.
func TestMergeRunsNothingTwice(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	cli := testutil.NewEtcdClient(t, cl.endpoints)
	h := newHistory(t)
	work := time.Millisecond

	// The poller counts snapshots with a range revoked to its own owner:
	// a merge under way.
	var mergeDrains atomic.Int64
	stop := make(chan struct{})
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			snap, err := coord.ReadSnapshot(t.Context(), cli, schema.Group{Name: "g"})
			if err != nil {
				continue
			}
			for _, r := range snap.Ranges {
				if r.Record.State != schema.StateActive && r.Record.Target == r.Record.Owner {
					mergeDrains.Add(1)
				}
			}
		}
	}()
	onePerOwner := func(owners int) func() bool {
		return func() bool {
			snap, err := coord.ReadSnapshot(t.Context(), cli, schema.Group{Name: "g"})
			if err != nil || len(snap.Ranges) != owners {
				return false
			}
			seen := map[string]bool{}
			for _, r := range snap.Ranges {
				if r.Record.State != schema.StateActive || seen[r.Record.Owner] {
					return false
				}
				seen[r.Record.Owner] = true
			}
			return true
		}
	}

	cl.start("a", h.handler("a", work))
	recs := testutil.KeyedRecords(6000, 200)
	produced := produceInBatches(t, k.Brokers, "orders", recs, 20, func(i int) {
		switch i {
		case 1:
			cl.start("b", h.handler("b", work))
		case 4:
			cl.start("c", h.handler("c", work))
		}
		time.Sleep(400 * time.Millisecond) // records keep coming through the merge
	})
	waitFor(t, "one range per owner", 60*time.Second, onePerOwner(3))
	waitFor(t, "all records handled", 60*time.Second, func() bool { return h.count() == len(produced) })
	close(stop)
	<-pollDone
	if mergeDrains.Load() == 0 {
		t.Fatal("no range was revoked to its own owner: nothing was merged")
	}
	if dups := h.check(produced); dups != 0 {
		t.Fatalf("%d records handled twice across joins and merges", dups)
	}
}
