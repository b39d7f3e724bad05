package consumer_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

// phases hands each handled record to the current phase's history, so
// that each phase of a test checks its own pass over the log.
type phases struct {
	mu sync.Mutex
	h  *history
}

func (ph *phases) set(h *history) {
	ph.mu.Lock()
	ph.h = h
	ph.mu.Unlock()
}

func (ph *phases) handler(id string, before func(*kafka.Message)) consumer.Handler {
	return func(ctx context.Context, m *kafka.Message) error {
		ph.mu.Lock()
		h := ph.h
		ph.mu.Unlock()
		if before != nil {
			before(m)
		}
		return h.handler(id, 0)(ctx, m)
	}
}

// TestResetWhilePaused: two members share one partition by hash range.
// A reset is refused while they run unpaused, with nothing changed. Then
// the group is paused while one record's handler is still running (it
// ignores its context), reset to the earliest offset and resumed: every
// record is handled again from offset 0 — including the one that was
// running, whose late completion must not be written over the reset — in
// per-key order, none twice, and the committed offset reaches the end.
// Then, paused again with new records waiting, a reset to the latest
// offset skips them: after resume only records produced later are handled.
func TestResetWhilePaused(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	cl := &cluster{t: t, endpoints: e.Endpoints, brokers: k.Brokers, group: "g", topics: []string{"orders"}}
	produced := testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(200, 10))
	committed := func() int64 { return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] }

	// In the first pass, offset 20's handler runs until released, whatever
	// its context says (a handler that ignores cancellation).
	release, entered := make(chan struct{}), make(chan struct{})
	var enterOnce sync.Once
	first := true
	var firstMu sync.Mutex
	block := func(m *kafka.Message) {
		firstMu.Lock()
		f := first
		firstMu.Unlock()
		if f && m.TopicPartition.Offset == 20 {
			enterOnce.Do(func() { close(entered) })
			<-release
		}
	}
	ph := &phases{h: newHistory(t)}
	m1 := cl.start("m1", ph.handler("m1", block))
	m2 := cl.start("m2", ph.handler("m2", block))
	members := []*member{m1, m2}
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the members stop, if the test ends early
	first1 := ph.h
	// All but offset 20 and the 17 later records of its key (key-0),
	// queued behind it, are handled; the committed offset waits at 20.
	waitFor(t, "182 handled, offset 20 in its handler, 20 committed", 60*time.Second, func() bool {
		select {
		case <-entered:
		default:
			return false
		}
		return first1.count() == 182 && committed() == 20
	})

	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers}, "/keyshare", "g")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()

	// Live and not paused: refused, naming the members and the way out.
	state := func() string {
		var b strings.Builder
		for _, p := range []string{"ranges/", "ledger/", "commits/"} {
			resp, err := cli.Get(t.Context(), "/keyshare/g/"+p, clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range resp.Kvs {
				b.Write(kv.Key)
				b.Write(kv.Value)
			}
		}
		return b.String()
	}
	_, err = g.PlanReset(t.Context(), []admin.Selector{{Topic: "orders", Partition: -1}}, admin.Reset{To: admin.ToEarliest})
	if !errors.Is(err, admin.ErrLiveMembers) || !strings.Contains(err.Error(), "m1, m2") || !strings.Contains(err.Error(), "keyshare group pause --group g") {
		t.Fatalf("plan while live and not paused: %v; want ErrLiveMembers naming m1, m2 and keyshare group pause", err)
	}
	before := state()
	if err := g.ApplyReset(t.Context(), []admin.PlanRow{{Topic: "orders", Partition: 0, New: 0}}); !errors.Is(err, admin.ErrLiveMembers) {
		t.Fatalf("apply while live and not paused: %v, want ErrLiveMembers", err)
	}
	if state() != before {
		t.Fatal("the refused reset changed etcd")
	}

	if err := g.Pause(t.Context(), "test", "reset"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both members paused", 30*time.Second, func() bool {
		return m1.c.Status().GroupPaused && m2.c.Status().GroupPaused
	})
	plan, err := g.PlanReset(t.Context(), []admin.Selector{{Topic: "orders", Partition: 0}}, admin.Reset{To: admin.ToEarliest})
	if err != nil || len(plan) != 1 || plan[0].New != 0 || plan[0].LogEnd != 200 {
		t.Fatalf("plan while paused: %+v, %v; want orders/0 to 0 of 200", plan, err)
	}
	if err := g.ApplyReset(t.Context(), plan); err != nil {
		t.Fatalf("reset while paused: %v", err)
	}
	if c := committed(); c != 0 {
		t.Fatalf("Kafka's committed offset is %d after the reset, want 0", c)
	}
	// Until a member reads the reset, the records it had queued run (a
	// pause lets dispatched records finish); once it has, its ranges start
	// at 0 and nothing of them is in flight: the queued ones are cancelled.
	waitFor(t, "both members to load the reset", 30*time.Second, func() bool {
		for _, m := range members {
			st := m.c.Status()
			if len(st.Ranges) == 0 {
				return false
			}
			for _, r := range st.Ranges {
				if r.Watermark != 0 || r.InFlight != 0 {
					return false
				}
			}
		}
		return true
	})
	replay := newHistory(t)
	ph.set(replay)
	// The handler that ran through the reset finishes now: its outcome is
	// ignored (the range it belonged to was reloaded).
	firstMu.Lock()
	first = false
	firstMu.Unlock()
	unblock()
	quiet(t, replay, 0, time.Second)

	if _, err := g.Resume(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the replay of all 200 and the commit at the end", 60*time.Second, func() bool {
		return replay.count() == 200 && committed() == 200
	})
	if dups := replay.check(produced); dups != 0 {
		t.Errorf("%d records handled twice in the replay, want none", dups)
	}

	// Forward: paused with 100 new records waiting, reset to the latest
	// offset; after resume only the 50 produced later are handled.
	if err := g.Pause(t.Context(), "test", "skip"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both members paused", 30*time.Second, func() bool {
		return m1.c.Status().GroupPaused && m2.c.Status().GroupPaused
	})
	skipped := testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(100, 10))
	plan, err = g.PlanReset(t.Context(), []admin.Selector{{Topic: "orders", Partition: -1}}, admin.Reset{To: admin.ToLatest})
	if err != nil || len(plan) != 1 || plan[0].New != 300 {
		t.Fatalf("plan --to-latest: %+v, %v; want orders/0 to 300", plan, err)
	}
	after := newHistory(t)
	ph.set(after)
	if err := g.ApplyReset(t.Context(), plan); err != nil {
		t.Fatalf("reset to latest while paused: %v", err)
	}
	if _, err := g.Resume(t.Context()); err != nil {
		t.Fatal(err)
	}
	later := testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(50, 10))
	waitFor(t, "the 50 later records handled and committed", 60*time.Second, func() bool {
		return after.count() == 50 && committed() == 350
	})
	if dups := after.check(later); dups != 0 {
		t.Errorf("%d records handled twice after the forward reset", dups)
	}
	after.mu.Lock()
	for _, tp := range skipped {
		if after.handled[recID(&kafka.Message{TopicPartition: tp})] > 0 {
			t.Errorf("offset %d was handled after the reset past it", tp.Offset)
		}
	}
	after.mu.Unlock()
	for _, m := range members {
		m.stop(t)
	}
}

// quiet fails if h handles anything but want records for d.
func quiet(t *testing.T, h *history, want int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if n := h.count(); n != want {
			t.Fatalf("%d records handled while the group is paused, want %d", n, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestResetPlanManyPartitions: a reset plan of more partitions than one
// request carries (600; the requests carry 256) reads every partition's
// committed offset and log bounds. Partition i holds i % 3 records, all
// handled and committed by a member that has left since.
func TestResetPlanManyPartitions(t *testing.T) {
	testutil.ParallelOnKfake(t)
	const n = 600
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"wide": n})
	var records []testutil.Record
	for i := range n {
		for range i % 3 {
			records = append(records, testutil.Record{Partition: int32(i), Key: []byte("k"), Value: []byte("v")})
		}
	}
	testutil.Produce(t, k.Brokers, "wide", records)
	cl := &cluster{t: t, endpoints: e.Endpoints, brokers: k.Brokers, group: "g", topics: []string{"wide"}}
	m := cl.start("m1", newHistory(t).handler("m1", 0))
	waitFor(t, "every partition committed at its end", 120*time.Second, func() bool {
		got, err := testutil.ReadCommitted(k.Brokers, "g", "wide", n)
		if err != nil {
			return false
		}
		for i := range int32(n) {
			if got[i] != int64(i%3) {
				return false
			}
		}
		return true
	})
	m.stop(t)

	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers}, "/keyshare", "g")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	plan, err := g.PlanReset(t.Context(), []admin.Selector{{Topic: "wide", Partition: -1}}, admin.Reset{To: admin.ToEarliest})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != n {
		t.Fatalf("plan of %d partitions, want %d", len(plan), n)
	}
	for i, row := range plan {
		want := admin.PlanRow{Topic: "wide", Partition: int32(i), Current: int64(i % 3), New: 0, LogStart: 0, LogEnd: int64(i % 3)}
		if row != want {
			t.Errorf("row %d: %+v, want %+v", i, row, want)
		}
	}
}
