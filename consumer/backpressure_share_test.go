package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

// partitionProgress counts the records handled per partition, and, for
// the partitions it watches, how many records of the backlog partition
// were handled before their first record was.
type partitionProgress struct {
	mu   sync.Mutex
	done map[int32]int
	// backlogBefore: the backlog partition's records handled before each
	// watched partition's first record was handled, and when.
	backlogBefore map[int32]int
	firstAt       map[int32]time.Time
}

func (pp *partitionProgress) handled(p int32) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	pp.done[p]++
	if _, ok := pp.firstAt[p]; !ok {
		pp.firstAt[p] = time.Now()
		pp.backlogBefore[p] = pp.done[0]
	}
}

func (pp *partitionProgress) count(p int32) int {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return pp.done[p]
}

// TestInFlightBoundSharedAcrossPartitions: partition 0 has a backlog of
// slow records, enough to take every slot of the in-flight bound; then
// partitions 1 and 2 get records that are handled at once. Each partition
// may hold only its share of the bound while the others want slots, so
// the slots partition 0 frees as its records finish go to the others: both
// handle all their records while partition 0 finishes fewer than half its
// backlog (taken first come first served, every freed slot went back to
// partition 0, whose fetched records librdkafka delivers first, and the
// others waited for the whole backlog). Progress is counted in records,
// not time; how long partitions 1 and 2 waited is logged.
func TestInFlightBoundSharedAcrossPartitions(t *testing.T) {
	testutil.ParallelOnKfake(t)
	const (
		bound   = 60
		backlog = 2000
		others  = 100 // records on each of partitions 1 and 2
		slow    = 20 * time.Millisecond
	)
	cl, k := newCluster(t, map[string]int32{"orders": 3})
	cl.mutate = func(c *consumer.Config) {
		c.MaxInFlight, c.Concurrency = bound, 4
	}
	pp := &partitionProgress{done: make(map[int32]int), backlogBefore: make(map[int32]int), firstAt: make(map[int32]time.Time)}
	m := cl.start("m", func(ctx context.Context, msg *kafka.Message) error {
		p := msg.TopicPartition.Partition
		if p == 0 {
			select {
			case <-time.After(slow):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		pp.handled(p)
		return nil
	})
	recs := make([]testutil.Record, backlog)
	for i := range recs {
		recs[i] = testutil.Record{Key: fmt.Appendf(nil, "slow-%d", i), Value: []byte("v"), Partition: 0}
	}
	testutil.Produce(t, k.Brokers, "orders", recs)
	waitFor(t, "partition 0's backlog at the in-flight bound", 30*time.Second, func() bool { return m.c.Status().InFlight >= bound })

	recs = recs[:0]
	for p := int32(1); p <= 2; p++ {
		for i := range others {
			recs = append(recs, testutil.Record{Key: fmt.Appendf(nil, "fast-%d-%d", p, i), Value: []byte("v"), Partition: p})
		}
	}
	producedAt := time.Now()
	startBacklog := pp.count(0)
	testutil.Produce(t, k.Brokers, "orders", recs)
	waitFor(t, "partitions 1 and 2 handled", 60*time.Second, func() bool {
		return pp.count(1) == others && pp.count(2) == others
	})
	spent := pp.count(0) - startBacklog
	pp.mu.Lock()
	for p := int32(1); p <= 2; p++ {
		t.Logf("partition %d: first record handled %v after it was produced, after %d of partition 0's records; all %d after %d",
			p, pp.firstAt[p].Sub(producedAt).Round(time.Millisecond), pp.backlogBefore[p]-startBacklog, others, spent)
	}
	pp.mu.Unlock()
	if spent >= backlog/2 {
		t.Errorf("partition 0 finished %d of its %d records before partitions 1 and 2 finished their %d each; want fewer than half: it may hold only its share (%d) of the bound (%d) while they want slots",
			spent, backlog, others, bound/3, bound)
	}
	if pp.count(0) == backlog {
		t.Fatal("partition 0's backlog finished: the test measured nothing")
	}
}

// TestInFlightBoundLentToTheOnlyBusyPartition: partition 0 has a backlog
// of slow records and partitions 1 and 2 have nothing to fetch. Their
// shares are lent to partition 0, which keeps the whole in-flight bound:
// it is not paused to its share for partitions that want no slot, so what
// it holds never falls to its share while its backlog lasts.
func TestInFlightBoundLentToTheOnlyBusyPartition(t *testing.T) {
	testutil.ParallelOnKfake(t)
	const (
		bound   = 60
		backlog = 1500
		slow    = 10 * time.Millisecond
	)
	cl, k := newCluster(t, map[string]int32{"orders": 3})
	cl.mutate = func(c *consumer.Config) {
		c.MaxInFlight, c.Concurrency = bound, 4
	}
	pp := &partitionProgress{done: make(map[int32]int), backlogBefore: make(map[int32]int), firstAt: make(map[int32]time.Time)}
	m := cl.start("m", func(ctx context.Context, msg *kafka.Message) error {
		select {
		case <-time.After(slow):
		case <-ctx.Done():
			return ctx.Err()
		}
		pp.handled(msg.TopicPartition.Partition)
		return nil
	})
	recs := make([]testutil.Record, backlog)
	for i := range recs {
		recs[i] = testutil.Record{Key: fmt.Appendf(nil, "slow-%d", i), Value: []byte("v"), Partition: 0}
	}
	testutil.Produce(t, k.Brokers, "orders", recs)
	waitFor(t, "partition 0's backlog at the in-flight bound", 30*time.Second, func() bool { return m.c.Status().InFlight >= bound })
	least := bound
	for start := time.Now(); time.Since(start) < 3*time.Second; time.Sleep(5 * time.Millisecond) {
		least = min(least, m.c.Status().InFlight)
	}
	if pp.count(0) >= backlog-bound {
		t.Fatal("partition 0's backlog ran out while it was watched: the test measured nothing")
	}
	if least <= bound/3 {
		t.Errorf("partition 0 held as few as %d records in flight; want more than its share, %d, of the bound %d: partitions with nothing to fetch took it from it", least, bound/3, bound)
	}
}
