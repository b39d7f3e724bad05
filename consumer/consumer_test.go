package consumer_test

import (
	"sync"
	"testing"
	"time"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/internal/devcluster"
	"github.com/keyshare/keyshare/testutil"
)

func TestFourMembersShareOnePartition(t *testing.T) {
	testutil.ParallelOnKfake(t)
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
	testutil.ParallelOnKfake(t)
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

// TestEtcdOutage: with etcd down, a member that is asked to stop stops
// within its drain budget and a few seconds (it cannot hand its ranges
// over; its lease expires and they fail over), and a member whose session
// ends in the outage rejoins with a new session once etcd is back, and
// consumes again.
func TestEtcdOutage(t *testing.T) {
	testutil.RequireKfake(t, "an etcd outage: the broker plays no part in it; the kfake run covers it")
	dir := t.TempDir()
	e, err := devcluster.StartEtcd(devcluster.EtcdOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	clientAddr, peerAddr := e.Clients[0].Addr().String(), e.Peers[0].Addr().String()
	var mu sync.Mutex // guards e: the cleanup kills the one running then
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if e != nil {
			e.Kill()
		}
	})
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	const drain = 3 * time.Second
	cl := &cluster{t: t, endpoints: []string{e.ClientURL()}, brokers: k.Brokers, group: "g", topics: []string{"orders"},
		mutate: func(c *consumer.Config) { c.DrainTimeout = drain }}
	h := newHistory(t)
	a := cl.start("a", h.handler("a", 0))
	waitFor(t, "a leads", 30*time.Second, func() bool { return a.c.Status().Leader })
	b := cl.start("b", h.handler("b", 0))
	waitFor(t, "b owns ranges", 30*time.Second, func() bool { return len(b.c.Status().Ranges) > 0 })
	recs := testutil.KeyedRecords(400, 20)
	produced := testutil.Produce(t, k.Brokers, "orders", recs[:200])
	waitFor(t, "records handled", 30*time.Second, func() bool { return h.count() == len(produced) })
	cli := testutil.NewEtcdClient(t, cl.endpoints)
	reg, err := cli.Get(t.Context(), "/keyshare/g/members/a")
	if err != nil || len(reg.Kvs) != 1 {
		t.Fatalf("a's registration: %v %v", reg, err)
	}
	mu.Lock()
	e.Kill()
	e = nil
	mu.Unlock()

	// b, not the leader, is asked to stop while etcd is gone.
	ttl := cl.config("x", nil).SessionTTL
	b.cancel()
	select {
	case err := <-b.done:
		close(b.done)
		if err != nil {
			t.Errorf("b's Run: %v", err)
		}
	case <-time.After(drain + ttl + 10*time.Second):
		t.Fatalf("b did not stop within its drain budget %s + TTL %s + 10s with etcd down", drain, ttl)
	}

	// a loses its session, and rejoins once etcd is back.
	waitFor(t, "a's session ends", ttl+10*time.Second, func() bool { return !a.c.Status().Running })
	e2, err := devcluster.StartEtcd(devcluster.EtcdOptions{Dir: dir, ClientAddr: clientAddr, PeerAddr: peerAddr})
	if err != nil {
		t.Fatalf("restart etcd: %v", err)
	}
	mu.Lock()
	e = e2
	mu.Unlock()
	waitFor(t, "a registered again with a new lease", 30*time.Second, func() bool {
		resp, err := cli.Get(t.Context(), "/keyshare/g/members/a")
		return err == nil && len(resp.Kvs) == 1 && resp.Kvs[0].Lease != reg.Kvs[0].Lease
	})
	produced = append(produced, testutil.Produce(t, k.Brokers, "orders", recs[200:])...)
	waitFor(t, "records produced after the outage handled", 30*time.Second, func() bool { return h.count() == len(produced) })
	h.check(produced)
}
