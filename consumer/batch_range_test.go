package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

// TestBatchDrainLeavesKeptRangesAlone: member a holds both partitions of
// orders. Its first call with a record of key-7 hangs, as an endpoint
// still working a request would, until its context ends (or 3 s pass,
// then it is done), when member b joins. One partition moves to b; its
// drain budget (1 s) is spent and its records are cancelled. No record of
// the partition a keeps is handed to a a second time: a drain ends only
// the calls that carry its own range's records.
func TestBatchDrainLeavesKeptRangesAlone(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 2})
	batchOpts := batchConfig(1000, 300*time.Millisecond) // the first call gathers both partitions' records
	cl.mutate = func(c *consumer.Config) {
		batchOpts(c)
		c.MaxInFlight = 2000
		c.DrainTimeout = time.Second
	}
	var mu sync.Mutex
	sent := map[string]int{} // record → times handed to a
	var twice []string
	var hung atomic.Bool
	cl.startBatch("a", func(ctx context.Context, batch []*kafka.Message) []error {
		hang := false
		mu.Lock()
		for _, m := range batch {
			id := recID(m)
			if sent[id]++; sent[id] == 2 {
				twice = append(twice, id)
			}
			hang = hang || string(m.Key) == "key-7"
		}
		mu.Unlock()
		if hang && hung.CompareAndSwap(false, true) {
			parts := map[int32]int{}
			for _, m := range batch {
				parts[m.TopicPartition.Partition]++
			}
			t.Logf("hung call: records per partition %v", parts)
			select {
			case <-ctx.Done():
				return consumer.FailAll(len(batch), ctx.Err())
			case <-time.After(3 * time.Second):
			}
		}
		return nil
	})
	var recs []testutil.Record
	perPart := [2]int64{}
	for i := range 400 {
		p := int32(i % 2)
		recs = append(recs, testutil.Record{Key: fmt.Appendf(nil, "key-%d", i%20), Value: []byte("v"), Partition: p})
		perPart[p]++
	}
	testutil.Produce(t, k.Brokers, "orders", recs)
	waitFor(t, "a's call with key-7 hangs", 30*time.Second, hung.Load)
	cl.startBatch("b", func(context.Context, []*kafka.Message) []error { return nil })
	waitFor(t, "the commits at the end", 60*time.Second, func() bool {
		c := testutil.Committed(t, k.Brokers, "g", "orders", 2)
		return c[0] == perPart[0] && c[1] == perPart[1]
	})
	mu.Lock()
	defer mu.Unlock()
	if len(twice) > 0 {
		t.Errorf("%d records handed to a twice, e.g. %v: a kept range's records were sent again after another range's drain ended their call", len(twice), twice[:min(3, len(twice))])
	}
}
