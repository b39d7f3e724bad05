package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

// TestBlockedKeyLeavesMemory: one key blocks with its records piling up.
// Beyond MaxQueuedPerKey they leave memory instead of filling MaxInFlight,
// so every other key's records are handled while it is blocked, the member
// never holds more than the bound, and the committed offset stays below the
// blocked record. Released, the key's records are fetched again and each
// runs once, in order; the commit reaches the end.
func TestBlockedKeyLeavesMemory(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	cl.mutate = func(c *consumer.Config) { c.MaxInFlight = 50 } // MaxQueuedPerKey: the default, 12
	h := newHistory(t)
	release := make(chan struct{})
	blockedAt := atomic.Int64{}
	blockedAt.Store(-1)
	m := cl.start("m", blockKey7(release, &blockedAt, h.handler("m", 0)))
	produced := testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(8000, 100))
	maxSeen := 0
	waitFor(t, "every record of the other keys handled while key-7 blocks", 90*time.Second, func() bool {
		maxSeen = max(maxSeen, m.c.Status().InFlight)
		return h.count() == len(produced)-80
	})
	if maxSeen > 50 {
		t.Fatalf("in flight reached %d, bound 50", maxSeen)
	}
	time.Sleep(500 * time.Millisecond) // a commit round or two
	if c, ok := testutil.Committed(t, k.Brokers, "g", "orders", 1)[0]; ok && c > blockedAt.Load() {
		t.Fatalf("committed %d past the blocked record at %d", c, blockedAt.Load())
	}
	close(release)
	waitFor(t, "all records", 60*time.Second, func() bool { return h.count() == len(produced) })
	waitFor(t, "commit reaches end", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == int64(len(produced))
	})
	if dups := h.check(produced); dups != 0 {
		t.Fatalf("%d records handled twice", dups)
	}
}

// TestBlockedKeyShelvedThenHandedOver: records of a blocked key are out of
// memory when a second member joins and the ranges are split between the
// two; whichever member owns key-7 afterwards runs its records, each once,
// in order, once the key is released.
func TestBlockedKeyShelvedThenHandedOver(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	cl.mutate = func(c *consumer.Config) { c.MaxInFlight, c.DrainTimeout = 50, 2*time.Second }
	h := newHistory(t)
	release := make(chan struct{})
	handler := func(id string) consumer.Handler { return blockKey7(release, nil, h.handler(id, 0)) }
	m1 := cl.start("m1", handler("m1"))
	produced := testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(8000, 100))
	waitFor(t, "the other keys handled by m1", 90*time.Second, func() bool { return h.count() == len(produced)-80 })
	m2 := cl.start("m2", handler("m2"))
	waitFor(t, "both members own ranges", 60*time.Second, func() bool {
		return len(m1.c.Status().Ranges) > 0 && len(m2.c.Status().Ranges) > 0
	})
	close(release)
	waitFor(t, "all records", 60*time.Second, func() bool { return h.count() == len(produced) })
	waitFor(t, "commit reaches end", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == int64(len(produced))
	})
	if dups := h.check(produced); dups != 0 {
		t.Fatalf("%d records handled twice", dups)
	}
}

// blockKey7 is inner, except that every record of key-7 waits for release
// first; the first one's offset goes to at, if not nil.
func blockKey7(release <-chan struct{}, at *atomic.Int64, inner consumer.Handler) consumer.Handler {
	return func(ctx context.Context, msg *kafka.Message) error {
		if string(msg.Key) == "key-7" {
			if at != nil {
				at.CompareAndSwap(-1, int64(msg.TopicPartition.Offset))
			}
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return inner(ctx, msg)
	}
}

// TestShelvedRecordsRunBeforeNewerOnes: keys a and b block with records of
// both shelved. a moves again while b stays blocked; a's next record,
// fetched for the first time only then, must not run before a's shelved
// record: a runs 0 1 2 3 4, in order, and every record runs once.
func TestShelvedRecordsRunBeforeNewerOnes(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	cl.mutate = func(c *consumer.Config) { c.MaxQueuedPerKey = 2 }
	h := newHistory(t)
	g := newGates("a:0", "b:0")
	m := cl.start("m", g.handler(h.handler("m", 0)))
	produced := produceValues(t, k.Brokers, "a:0", "a:1", "a:2", "b:0", "b:1", "b:2")
	g.waitStarted(t, "a:0", "b:0")
	waitBlocked()
	produced = append(produced, produceValues(t, k.Brokers, "a:3", "b:3")...)
	waitFor(t, "a:3 and b:3 shelved", 30*time.Second, func() bool { return m.counter(t, "keyshare_records_shelved_total") >= 2 })

	g.open("a:0")
	waitFor(t, "a:2 handled", 30*time.Second, func() bool { return h.handledValue("a:2") })
	produced = append(produced, produceValues(t, k.Brokers, "a:4")...)
	waitFor(t, "a:4 handled", 30*time.Second, func() bool { return h.handledValue("a:4") })
	g.open("b:0")
	waitFor(t, "all records", 30*time.Second, func() bool { return h.count() == len(produced) })
	if dups := h.check(produced); dups != 0 {
		t.Fatalf("%d records handled twice", dups)
	}
}

// TestPoisonKeyHoldsOnlyItsOwnRecords: keys a and b block with records of
// both shelved; b's head record fails for good (no dead-letter topic). Once
// a moves again, every record of a — shelved or fetched later — runs, in
// order, while b stays poisoned, and the committed offset stays at b's
// record.
func TestPoisonKeyHoldsOnlyItsOwnRecords(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	cl.mutate = func(c *consumer.Config) {
		c.MaxQueuedPerKey = 2
		c.Retry = consumer.RetryPolicy{MaxAttempts: 3, Backoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
		c.DrainTimeout = time.Second // leaving, the poisoned record does not finish
	}
	h := newHistory(t)
	g := newGates("a:0")
	m := cl.start("m", g.handler(poisonB(h.handler("m", 0))))
	poisonedKeyScenario(t, k, h, g, m)
}

// TestPoisonKeyHoldsOnlyItsOwnRecordsBatch is
// TestPoisonKeyHoldsOnlyItsOwnRecords with a BatchHandler.
func TestPoisonKeyHoldsOnlyItsOwnRecordsBatch(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	cl.mutate = func(c *consumer.Config) {
		batchConfig(10, 5*time.Millisecond)(c)
		c.MaxQueuedPerKey = 2
		c.Retry = consumer.RetryPolicy{MaxAttempts: 3, Backoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
		c.DrainTimeout = time.Second // leaving, the poisoned record does not finish
	}
	h := newHistory(t)
	g := newGates("a:0")
	fail := func(m *kafka.Message) error {
		if string(m.Key) == "b" {
			return errPoison
		}
		return nil
	}
	m := cl.startBatch("m", g.batchHandler(h.batchHandler("m", 0, fail, nil)))
	poisonedKeyScenario(t, k, h, g, m)
}

// poisonedKeyScenario is the body of the poisoned key tests: m's handler
// holds a:0 until g opens it and fails every record of key b.
func poisonedKeyScenario(t *testing.T, k *testutil.Kafka, h *history, g *gates, m *member) {
	t.Helper()
	first := produceValues(t, k.Brokers, "a:0", "b:0", "a:1", "b:1", "a:2", "b:2")
	poisonAt := int64(first[1].Offset)
	g.waitStarted(t, "a:0")
	waitBlocked()
	a := []kafka.TopicPartition{first[0], first[2], first[4]}
	for i := 3; i < 8; i++ {
		p := produceValues(t, k.Brokers, fmt.Sprintf("a:%d", i), fmt.Sprintf("b:%d", i))
		a = append(a, p[0])
	}
	// At most five records of a key are in memory (a batch of three, two
	// queued): at least three of each are shelved.
	waitFor(t, "records of a and b shelved", 30*time.Second, func() bool { return m.counter(t, "keyshare_records_shelved_total") >= 6 })

	g.open("a:0")
	for i := 8; i < 11; i++ {
		a = append(a, produceValues(t, k.Brokers, fmt.Sprintf("a:%d", i))...)
	}
	waitFor(t, "every record of a handled while b is poisoned", 20*time.Second, func() bool {
		for i := range 11 {
			if !h.handledValue(fmt.Sprintf("a:%d", i)) {
				return false
			}
		}
		return true
	})
	if dups := h.check(a); dups != 0 {
		t.Fatalf("%d records handled twice", dups)
	}
	if c, ok := testutil.Committed(t, k.Brokers, "g", "orders", 1)[0]; ok && c > poisonAt {
		t.Fatalf("committed %d past the poisoned record at %d", c, poisonAt)
	}
}

var errPoison = errors.New("poison record")

// poisonB is inner, except that every record of key b fails.
func poisonB(inner consumer.Handler) consumer.Handler {
	return func(ctx context.Context, msg *kafka.Message) error {
		if string(msg.Key) == "b" {
			return errPoison
		}
		return inner(ctx, msg)
	}
}

// waitBlocked waits until keys whose head record has run for a while count
// as blocked: no record of them has started for a second.
func waitBlocked() { time.Sleep(1500 * time.Millisecond) }

// produceValues produces a record per value "key:seq" to partition 0 of
// "orders", keyed by key, and returns their offsets in order.
func produceValues(t *testing.T, brokers string, values ...string) []kafka.TopicPartition {
	t.Helper()
	recs := make([]testutil.Record, len(values))
	for i, v := range values {
		key, _, _ := strings.Cut(v, ":")
		recs[i] = testutil.Record{Key: []byte(key), Value: []byte(v)}
	}
	return testutil.Produce(t, brokers, "orders", recs)
}

// handledValue reports whether the record with value v has been handled.
func (h *history) handledValue(v string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.values[v]
}

// gates hold the records with the given values until opened.
type gates struct {
	g map[string]*gate // read-only once newGates returns: no lock needed
}

type gate struct {
	started, open chan struct{}
	once          sync.Once
}

func newGates(values ...string) *gates {
	g := &gates{g: make(map[string]*gate)}
	for _, v := range values {
		g.g[v] = &gate{started: make(chan struct{}), open: make(chan struct{})}
	}
	return g
}

// wait holds a record with value v until its gate opens (or ctx ends).
func (g *gates) wait(ctx context.Context, v string) error {
	x := g.g[v]
	if x == nil {
		return nil
	}
	x.once.Do(func() { close(x.started) })
	select {
	case <-x.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gates) open(v string) { close(g.g[v].open) }

func (g *gates) waitStarted(t *testing.T, values ...string) {
	t.Helper()
	for _, v := range values {
		select {
		case <-g.g[v].started:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not start", v)
		}
	}
}

func (g *gates) handler(inner consumer.Handler) consumer.Handler {
	return func(ctx context.Context, msg *kafka.Message) error {
		if err := g.wait(ctx, string(msg.Value)); err != nil {
			return err
		}
		return inner(ctx, msg)
	}
}

func (g *gates) batchHandler(inner consumer.BatchHandler) consumer.BatchHandler {
	return func(ctx context.Context, batch []*kafka.Message) []error {
		for _, m := range batch {
			if err := g.wait(ctx, string(m.Value)); err != nil {
				return consumer.FailAll(len(batch), err)
			}
		}
		return inner(ctx, batch)
	}
}
