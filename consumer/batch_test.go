package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

var errSkipped = errors.New("an earlier record of its key failed in this batch")

// batchHandler returns a BatchHandler for member id that records into h:
// every key of the batch is marked running for the whole call (exclusion
// is checked across batches and members), the call costs perCall, and then
// the records are applied in batch order, checking per-key order. fail, if
// not nil, fails a record; the key's later records in the batch are not
// applied then (as docs/consumer.md asks of a handler).
func (h *history) batchHandler(id string, perCall time.Duration, fail func(*kafka.Message) error, sizes *sizes) consumer.BatchHandler {
	return func(ctx context.Context, batch []*kafka.Message) []error {
		if sizes != nil {
			sizes.add(len(batch))
		}
		keyOf := func(m *kafka.Message) string {
			return fmt.Sprintf("%s/%d/%s", *m.TopicPartition.Topic, m.TopicPartition.Partition, m.Key)
		}
		mine := map[string]bool{}
		h.mu.Lock()
		for _, m := range batch {
			k := keyOf(m)
			if mine[k] {
				continue
			}
			mine[k] = true
			if other, busy := h.running[k]; busy {
				h.orderErrs = append(h.orderErrs, fmt.Sprintf("key %s in a batch of %s while %s handles it", k, id, other))
			}
			h.running[k] = id + "@" + recID(m)
		}
		h.mu.Unlock()
		unmark := func() {
			for k := range mine {
				delete(h.running, k)
			}
		}
		if perCall > 0 {
			select {
			case <-time.After(perCall):
			case <-ctx.Done():
				h.mu.Lock()
				unmark()
				h.mu.Unlock()
				return consumer.FailAll(len(batch), ctx.Err())
			}
		}
		res := make([]error, len(batch))
		failed := map[string]bool{}
		h.mu.Lock()
		defer h.mu.Unlock()
		defer unmark()
		for i, m := range batch {
			k := keyOf(m)
			if failed[k] {
				res[i] = errSkipped
				continue
			}
			if fail != nil {
				if err := fail(m); err != nil {
					res[i], failed[k] = err, true
					continue
				}
			}
			h.applyLocked(id, k, m)
		}
		return res
	}
}

// applyLocked is history.handler's bookkeeping of one handled record.
func (h *history) applyLocked(id, key string, m *kafka.Message) {
	rid := recID(m)
	h.handled[rid]++
	h.values[string(m.Value)] = true
	h.total++
	if h.handled[rid] > 1 {
		h.dups++
		return
	}
	if _, seqStr, ok := strings.Cut(string(m.Value), ":"); ok {
		seq, _ := strconv.Atoi(seqStr)
		if last, ok := h.lastSeq[key]; ok && seq < last {
			h.orderErrs = append(h.orderErrs, fmt.Sprintf("key %s: seq %d after %d (offset %d, member %s)", key, seq, last, m.TopicPartition.Offset, id))
		}
		h.lastSeq[key] = max(h.lastSeq[key], seq)
	}
}

// sizes counts batches and their records.
type sizes struct{ n, records, max atomic.Int64 }

func (s *sizes) add(n int) {
	s.n.Add(1)
	s.records.Add(int64(n))
	for {
		m := s.max.Load()
		if int64(n) <= m || s.max.CompareAndSwap(m, int64(n)) {
			return
		}
	}
}

func (s *sizes) String() string {
	n := max(s.n.Load(), 1)
	return fmt.Sprintf("%d batches, mean %.1f records, max %d", s.n.Load(), float64(s.records.Load())/float64(n), s.max.Load())
}

func batchConfig(size int, wait time.Duration) func(*consumer.Config) {
	return func(c *consumer.Config) {
		c.Handler = nil
		c.MaxBatchSize, c.MaxBatchWait = size, wait
	}
}

// startBatch starts a member with a batch handler.
func (cl *cluster) startBatch(id string, bh consumer.BatchHandler) *member {
	cl.t.Helper()
	prev := cl.mutate
	cl.mutate = func(c *consumer.Config) {
		if prev != nil {
			prev(c)
		}
		c.Handler, c.BatchHandler = nil, bh
	}
	defer func() { cl.mutate = prev }()
	return cl.start(id, nil)
}

// TestBatchScaleOutAndIn: members with a batch handler join (1→3) and
// leave (3→1) while records flow and batches run (each call costs 20 ms):
// per-key order holds inside and across batches and members, no key is in
// two batches at once, and graceful handoffs mid-batch run nothing twice.
func TestBatchScaleOutAndIn(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 2})
	cl.mutate = batchConfig(50, 5*time.Millisecond)
	h := newHistory(t)
	var sz sizes
	ids := []string{"m1", "m2", "m3"}
	members := map[string]*member{"m1": cl.startBatch("m1", h.batchHandler("m1", 20*time.Millisecond, nil, &sz))}
	recs := testutil.KeyedRecords(3000, 300)
	for i := range recs {
		recs[i].Partition = int32(i % 2)
	}
	produced := produceInBatches(t, k.Brokers, "orders", recs, 5, func(i int) {
		switch i {
		case 0, 1:
			id := ids[i+1]
			members[id] = cl.startBatch(id, h.batchHandler(id, 20*time.Millisecond, nil, &sz))
		case 2, 3:
			id := ids[4-i]
			members[id].stop(t)
			delete(members, id)
		}
		time.Sleep(700 * time.Millisecond)
	})
	waitFor(t, "all records handled", 90*time.Second, func() bool { return h.count() == len(produced) })
	dups := h.check(produced)
	t.Logf("batch scale 1→3→1: %d records, %d handled twice; %s", len(produced), dups, &sz)
	if dups != 0 {
		t.Fatalf("graceful rebalances ran %d records twice", dups)
	}
	if sz.max.Load() < 2 {
		t.Fatalf("no batch held more than one record (%s)", &sz)
	}
}

// TestBatchHandoffMidBatch: a second member joins while the first is in
// the middle of slow batches (400 ms per call); the revoked range drains
// its running batch and hands over: no record runs twice, no key overlaps.
func TestBatchHandoffMidBatch(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	batchOpts := batchConfig(100, 20*time.Millisecond)
	cl.mutate = func(c *consumer.Config) {
		batchOpts(c)
		c.Concurrency = 2 // a needs several rounds of batches for the 2,000 records
	}
	h := newHistory(t)
	var started atomic.Bool
	var running, inFlightAtRevoke atomic.Int32
	innerA := h.batchHandler("a", 400*time.Millisecond, nil, nil)
	a := cl.startBatch("a", func(ctx context.Context, batch []*kafka.Message) []error {
		started.Store(true)
		running.Add(1)
		defer running.Add(-1)
		return innerA(ctx, batch)
	})
	produced := testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(2000, 100))
	waitFor(t, "a's first batch", 30*time.Second, started.Load)
	time.Sleep(100 * time.Millisecond) // mid-batch
	var byB atomic.Int32
	innerB := h.batchHandler("b", 400*time.Millisecond, nil, nil)
	cl.startBatch("b", func(ctx context.Context, batch []*kafka.Message) []error {
		byB.Add(int32(len(batch)))
		return innerB(ctx, batch)
	})
	waitFor(t, "a revokes a range", 30*time.Second, func() bool {
		for _, r := range a.c.Status().Ranges {
			if r.State == "revoking" {
				inFlightAtRevoke.Store(int32(r.InFlight))
				t.Logf("revoke seen: %d batches of a running, %d records of the range in flight", running.Load(), r.InFlight)
				return true
			}
		}
		return false
	})
	waitFor(t, "all records handled", 90*time.Second, func() bool { return h.count() == len(produced) })
	if inFlightAtRevoke.Load() == 0 {
		t.Fatal("the revoked range had no record in flight: nothing was drained")
	}
	if byB.Load() == 0 {
		t.Fatal("b handled nothing: no handoff happened while records remained")
	}
	if dups := h.check(produced); dups != 0 {
		t.Fatalf("a handoff mid-batch ran %d records twice", dups)
	}
	t.Logf("b handled %d of %d records after the handoff", byB.Load(), len(produced))
	waitFor(t, "commit reaches end", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == int64(len(produced))
	})
}

// TestBatchCrashFailover: a member's lease is revoked while its batches
// run (no handoff); its ranges resume elsewhere from the last flush. No
// record is lost; duplicates stay within the bound (flush interval × rate
// + in-flight bound).
func TestBatchCrashFailover(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	cl.mutate = batchConfig(50, 5*time.Millisecond)
	h := newHistory(t)
	cl.startBatch("a", h.batchHandler("a", 10*time.Millisecond, nil, nil))
	cl.startBatch("b", h.batchHandler("b", 10*time.Millisecond, nil, nil))
	cli := testutil.NewEtcdClient(t, cl.endpoints)
	recs := testutil.KeyedRecords(2000, 200)
	produced := produceInBatches(t, k.Brokers, "orders", recs, 4, func(i int) {
		if i == 1 {
			resp, err := cli.Get(t.Context(), "/keyshare/g/members/a")
			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("a's registration: %v", err)
			}
			if _, err := cli.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(300 * time.Millisecond)
	})
	waitFor(t, "all records handled", 90*time.Second, func() bool { return h.count() == len(produced) })
	dups := h.check(produced)
	cfg := cl.config("x", nil)
	bound := cfg.MaxInFlight + len(recs)
	t.Logf("batch crash failover: %d records, %d handled twice (bound %d)", len(produced), dups, bound)
	if dups > bound {
		t.Fatalf("%d duplicates exceed the bound %d", dups, bound)
	}
}

// TestBatchPartialFailureAndDeadLetter: the batch handler fails every
// record of key-3 once (the key's later records in those batches wait) and
// always fails the record at offset 42 (key-2), which is dead-lettered
// after 3 attempts with its headers. Every other record is handled once,
// in per-key order, and the commit reaches the end.
func TestBatchPartialFailureAndDeadLetter(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1, "orders.dlq": 1})
	cl.topics = []string{"orders"}
	batchOpts := batchConfig(20, 10*time.Millisecond)
	cl.mutate = func(c *consumer.Config) {
		batchOpts(c)
		c.DeadLetterTopic = "orders.dlq"
		c.Retry = consumer.RetryPolicy{MaxAttempts: 3, Backoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
	}
	h := newHistory(t)
	var poisonTries atomic.Int32
	failedOnce := map[int64]bool{} // only the handler's goroutines touch it, under h.mu
	fail := func(m *kafka.Message) error {
		o := int64(m.TopicPartition.Offset)
		switch {
		case o == 42:
			poisonTries.Add(1)
			return errors.New("poison at 42")
		case string(m.Key) == "key-3" && !failedOnce[o]:
			failedOnce[o] = true
			return errors.New("key-3 fails once")
		}
		return nil
	}
	var sz sizes
	mem := cl.startBatch("m", h.batchHandler("m", 5*time.Millisecond, fail, &sz))
	produced := testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(200, 10))
	waitFor(t, "commit reaches end", 60*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == int64(len(produced))
	})
	if got := poisonTries.Load(); got != 3 {
		t.Fatalf("poison record tried %d times, want 3", got)
	}
	var rest []kafka.TopicPartition
	for _, p := range produced {
		if p.Offset != 42 {
			rest = append(rest, p)
		}
	}
	if dups := h.check(rest); dups != 0 {
		t.Fatalf("%d records handled twice", dups)
	}
	t.Logf("%s", &sz)
	// The batch histogram counts every call and every record handed over.
	mfs, err := mem.c.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "keyshare_batch_records" {
			found = true
			hg := mf.GetMetric()[0].GetHistogram()
			if int64(hg.GetSampleCount()) != sz.n.Load() || int64(hg.GetSampleSum()) != sz.records.Load() {
				t.Errorf("keyshare_batch_records: %d calls, %v records; the handler saw %s", hg.GetSampleCount(), hg.GetSampleSum(), &sz)
			}
		}
	}
	if !found {
		t.Error("no keyshare_batch_records metric")
	}

	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": k.Brokers, "group.id": "reader", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topic := "orders.dlq"
	if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: 0}}); err != nil {
		t.Fatal(err)
	}
	m, err := c.ReadMessage(20 * time.Second)
	if err != nil {
		t.Fatalf("read dead-letter topic: %v", err)
	}
	hdr := make(map[string]string)
	for _, x := range m.Headers {
		hdr[x.Key] = string(x.Value)
	}
	if hdr[consumer.HeaderOffset] != "42" || hdr[consumer.HeaderAttempts] != "3" || !strings.Contains(hdr[consumer.HeaderError], "poison at 42") {
		t.Fatalf("dead-letter headers: %v", hdr)
	}
	if m2, err := c.ReadMessage(time.Second); err == nil {
		t.Fatalf("a second dead letter: offset %s", m2.Headers)
	}
}

// TestBatchDrainTimeoutCancelsBatch: a batch hangs (its handler waits for
// ctx) when a second member joins; the revoked range cannot drain, so at
// the drain timeout its records are cancelled, which ends the batch's
// context. The hung batch applied nothing; its records run again (those
// of the revoked range on the new owner, the others here, not counted as
// attempts): every record is handled once, in per-key order.
func TestBatchDrainTimeoutCancelsBatch(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	batchOpts := batchConfig(100, 20*time.Millisecond)
	cl.mutate = func(c *consumer.Config) {
		batchOpts(c)
		c.DrainTimeout = time.Second
		c.Retry = consumer.RetryPolicy{MaxAttempts: 1, Backoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond} // an attempt would show as a failure
	}
	h := newHistory(t)
	var hung, cancelled atomic.Bool
	var failures atomic.Int32
	inner := h.batchHandler("a", time.Millisecond, nil, nil)
	a := cl.startBatch("a", func(ctx context.Context, batch []*kafka.Message) []error {
		for _, m := range batch {
			if string(m.Key) == "key-7" && hung.CompareAndSwap(false, true) {
				<-ctx.Done()
				cancelled.Store(true)
				return consumer.FailAll(len(batch), ctx.Err())
			}
		}
		res := inner(ctx, batch)
		if ctx.Err() != nil {
			// A batch that shared a record with the drained range ends
			// with it; the member puts its other records back without
			// counting an attempt (checked by StuckKeys below).
			return res
		}
		for _, err := range res {
			if err != nil {
				failures.Add(1)
			}
		}
		return res
	})
	produced := testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(1000, 50))
	waitFor(t, "a batch hangs", 30*time.Second, hung.Load)
	cl.startBatch("b", h.batchHandler("b", time.Millisecond, nil, nil))
	waitFor(t, "the drain timeout cancels the hung batch", 30*time.Second, cancelled.Load)
	waitFor(t, "all records handled", 60*time.Second, func() bool { return h.count() == len(produced) })
	if dups := h.check(produced); dups != 0 {
		t.Fatalf("%d records handled twice", dups)
	}
	if f := failures.Load(); f != 0 {
		t.Fatalf("%d records failed", f)
	}
	if st := a.c.Status(); len(st.StuckKeys) != 0 {
		t.Fatalf("a reports stuck records (attempts counted?): %+v", st.StuckKeys)
	}
	waitFor(t, "commit reaches end", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == int64(len(produced))
	})
}

// TestBatchBackpressure: records in batches count as in flight. While a
// batch holding key-7 hangs (its key's later records queue behind it), the
// member stops at MaxInFlight and pauses the partition; the records in
// running batches and the queued ones together never pass the bound.
func TestBatchBackpressure(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	batchOpts := batchConfig(20, 5*time.Millisecond)
	cl.mutate = func(c *consumer.Config) {
		batchOpts(c)
		c.MaxInFlight, c.Concurrency = 60, 2
	}
	h := newHistory(t)
	inner := h.batchHandler("m", 0, nil, nil)
	release := make(chan struct{})
	var inBatches, maxInBatches atomic.Int64
	m := cl.startBatch("m", func(ctx context.Context, batch []*kafka.Message) []error {
		n := inBatches.Add(int64(len(batch)))
		defer inBatches.Add(-int64(len(batch)))
		for {
			if old := maxInBatches.Load(); n <= old || maxInBatches.CompareAndSwap(old, n) {
				break
			}
		}
		for _, msg := range batch {
			if string(msg.Key) == "key-7" {
				select {
				case <-release:
				case <-ctx.Done():
					return consumer.FailAll(len(batch), ctx.Err())
				}
				break
			}
		}
		return inner(ctx, batch)
	})
	produced := testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(4000, 100))
	maxSeen := 0
	waitFor(t, "the partition paused at the bound", 60*time.Second, func() bool {
		st := m.c.Status()
		maxSeen = max(maxSeen, st.InFlight)
		return st.Paused
	})
	for range 20 {
		maxSeen = max(maxSeen, m.c.Status().InFlight)
		time.Sleep(10 * time.Millisecond)
	}
	if maxSeen > 60 {
		t.Fatalf("in flight reached %d, bound 60", maxSeen)
	}
	if got := maxInBatches.Load(); got > 60 {
		t.Fatalf("%d records in running batches at once, bound 60", got)
	}
	if n := h.count(); n >= len(produced)-40 {
		t.Fatalf("%d records handled while key-7 blocked: fetching did not stop at the bound", n)
	}
	close(release)
	waitFor(t, "all records", 60*time.Second, func() bool { return h.count() == len(produced) })
	if dups := h.check(produced); dups != 0 {
		t.Fatalf("%d duplicates", dups)
	}
}
