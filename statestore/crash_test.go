package statestore

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

// TestCountThroughCrash: a member's session is lost (its lease revoked, as
// when it is killed) after it appended changes it never recorded in its
// ledger. The next owner runs those records again from the ledger's
// watermark; the skip rule keeps them from counting twice, so each key's
// count is exactly its number of records. With the skip rule turned off
// the same run counts those records twice: the check bites.
func TestCountThroughCrash(t *testing.T) {
	for _, tc := range []struct {
		name string
		skip bool
	}{{"skip rule", true}, {"skip rule off", false}} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.skip {
				skipApplied = false
				t.Cleanup(func() { skipApplied = true })
			}
			testCountThroughCrash(t, tc.skip)
		})
	}
}

func testCountThroughCrash(t *testing.T, skip bool) {
	g := newGroup(t, 1)
	// a flushes its ledger once, when its range's watermark first moves
	// (a range taken up is flushed at once), and never again on its own:
	// every record it completes after the first runs again on b after
	// the crash.
	a := g.start("a", count, func(c *consumer.Config) { c.FlushInterval = time.Hour })
	first := testutil.KeyedRecords(1, 1)
	g.waitCommitted(testutil.Produce(t, g.brokers, g.topic, first))
	more := testutil.KeyedRecords(600, 30)
	first = append(first, more...)
	testutil.Produce(t, g.brokers, g.topic, more)
	testutil.WaitFor(t, "a's changes appended", 30*time.Second, func() bool { return a.store.Stats().Changes == int64(len(first)) })

	cli := testutil.NewEtcdClient(t, g.endpoints)
	resp, err := cli.Get(t.Context(), "/keyshare/"+g.name+"/members/a")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("a's registration: %v", err)
	}
	if _, err := cli.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	a.stop(t)

	b := g.start("b", count, nil)
	second := testutil.KeyedRecords(300, 30)
	all := append(first, second...)
	g.waitCommitted(testutil.Produce(t, g.brokers, g.topic, second))
	b.stop(t)
	st := b.store.Stats()
	t.Logf("b: %+v", st)
	if !skip {
		got, exp := g.counts(), want(all)
		over := 0
		for k, n := range exp {
			if got[k] > n {
				over++
			}
		}
		if over == 0 {
			t.Fatalf("with the skip rule off no key counted over its records: the crash re-ran nothing, and the test proves nothing")
		}
		t.Logf("skip rule off: %d of %d keys counted over their records", over, len(exp))
		return
	}
	g.checkCounts(all)
	if st.Skipped < int64(len(more)) {
		t.Errorf("b skipped %d records, want the %d a completed after its one flush", st.Skipped, len(more))
	}
}
