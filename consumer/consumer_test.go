package consumer_test

import (
	"testing"
	"time"

	"github.com/keyshare/keyshare/testutil"
)

func TestFourMembersShareOnePartition(t *testing.T) {
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	cl := &cluster{t: t, endpoints: e.Endpoints, brokers: k.Brokers, group: "g", topics: []string{"orders"}}
	h := newHistory(t)
	commits := watchCommits(t, k.Brokers, "g", "orders", 1)
	for _, id := range []string{"m1", "m2", "m3", "m4"} {
		cl.start(id, h.handler(id, time.Millisecond))
	}
	produced := testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(4000, 1000))
	waitFor(t, "all records handled", 60*time.Second, func() bool { return h.count() == len(produced) })
	waitFor(t, "committed offset reaches the end", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == int64(len(produced))
	})
	if dups := h.check(produced); dups != 0 {
		t.Fatalf("%d records handled twice", dups)
	}
	commits.close()
	commits.checkMonotonic(t)
}

// TestCloseStopsRun: Close ends a running Run as ending its context does
// (the member leaves and its records are handed over), waits for it, and is
// idempotent; Run refuses to start after Close.
func TestCloseStopsRun(t *testing.T) {
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	produced := testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(200, 10))
	h := newHistory(t)
	m := cl.start("a", h.handler("a", 0))
	waitFor(t, "records handled", 30*time.Second, func() bool { return h.count() >= len(produced) })
	if err := m.c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-m.done:
		if err != nil {
			t.Fatalf("Run after Close: %v", err)
		}
		close(m.done)
	case <-time.After(5 * time.Second): // Run has returned; its result is on its way
		t.Fatal("Run did not return after Close")
	}
	if err := m.c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := m.c.Run(t.Context()); err == nil {
		t.Fatal("Run after Close started")
	}
	h.check(produced)
}
