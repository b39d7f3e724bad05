package consumer_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// TestSkipDuringBackoff: key k's first record always fails and waits out
// a 3 s backoff. A skip with Drop set after its first failure is applied
// at once: the handler is not called for the record again, the key's
// next record runs and the commit reaches the end. The same with a
// BatchHandler.
func TestSkipDuringBackoff(t *testing.T) {
	t.Run("handler", func(t *testing.T) { testSkipDuringBackoff(t, false) })
	t.Run("batch", func(t *testing.T) { testSkipDuringBackoff(t, true) })
}

func testSkipDuringBackoff(t *testing.T, batch bool) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	cl.mutate = func(c *consumer.Config) {
		c.Retry = consumer.RetryPolicy{MaxAttempts: 1 << 20, Backoff: 3 * time.Second, MaxBackoff: 3 * time.Second}
	}
	var poisonCalls atomic.Int32
	var mu sync.Mutex
	var handled []int64
	handle := func(m *kafka.Message) error {
		if m.TopicPartition.Offset == 0 {
			poisonCalls.Add(1)
			return errors.New("no such customer")
		}
		mu.Lock()
		handled = append(handled, int64(m.TopicPartition.Offset))
		mu.Unlock()
		return nil
	}
	if batch {
		cl.startBatch("m", func(_ context.Context, ms []*kafka.Message) []error {
			res := make([]error, len(ms))
			for i, m := range ms {
				if i > 0 && res[i-1] != nil {
					res[i] = res[i-1] // a key's records after its failed one
					continue
				}
				res[i] = handle(m)
			}
			return res
		})
	} else {
		cl.start("m", func(_ context.Context, m *kafka.Message) error { return handle(m) })
	}
	produced := testutil.Produce(t, k.Brokers, "orders", []testutil.Record{{Key: []byte("k"), Value: []byte("k:0")}, {Key: []byte("k"), Value: []byte("k:1")}})
	waitFor(t, "the first failure", 30*time.Second, func() bool { return poisonCalls.Load() == 1 })
	cli := testutil.NewEtcdClient(t, cl.endpoints)
	if _, err := coord.PutKeyOp(t.Context(), cli, schema.Group{Prefix: "/keyshare", Name: "g"},
		schema.KeyOpRecord{Op: schema.KeyOpSkip, Topic: "orders", Partition: 0, Key: []byte("k"), Offset: 0, Drop: true, By: "test"}, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the commit at the end", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == int64(len(produced))
	})
	if n := poisonCalls.Load(); n != 1 {
		t.Errorf("the skipped record was handed to the handler %d times, want once: the skip was not applied before the next attempt", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(handled) != 1 || handled[0] != 1 {
		t.Errorf("handled %v, want [1]", handled)
	}
}

// TestSkipBeforeFirstBatch: a skip with Drop is set on key k's first
// record before a member starts. The record is never handed to the
// handler; the key's next record is. The same with a BatchHandler.
func TestSkipBeforeFirstBatch(t *testing.T) {
	t.Run("handler", func(t *testing.T) { testSkipBeforeFirstBatch(t, false) })
	t.Run("batch", func(t *testing.T) { testSkipBeforeFirstBatch(t, true) })
}

func testSkipBeforeFirstBatch(t *testing.T, batch bool) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	produced := testutil.Produce(t, k.Brokers, "orders", []testutil.Record{{Key: []byte("k"), Value: []byte("k:0")}, {Key: []byte("k"), Value: []byte("k:1")}})
	cli := testutil.NewEtcdClient(t, cl.endpoints)
	if _, err := coord.PutKeyOp(t.Context(), cli, schema.Group{Prefix: "/keyshare", Name: "g"},
		schema.KeyOpRecord{Op: schema.KeyOpSkip, Topic: "orders", Partition: 0, Key: []byte("k"), Offset: 0, Drop: true, By: "test"}, 0); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var handled []int64
	handle := func(m *kafka.Message) error {
		mu.Lock()
		defer mu.Unlock()
		handled = append(handled, int64(m.TopicPartition.Offset))
		return nil
	}
	if batch {
		cl.startBatch("m", func(_ context.Context, ms []*kafka.Message) []error {
			for _, m := range ms {
				_ = handle(m)
			}
			return nil
		})
	} else {
		cl.start("m", func(_ context.Context, m *kafka.Message) error { return handle(m) })
	}
	waitFor(t, "the commit at the end", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == int64(len(produced))
	})
	mu.Lock()
	defer mu.Unlock()
	if len(handled) != 1 || handled[0] != 1 {
		t.Errorf("handled %v, want [1]: the skipped record reached the handler", handled)
	}
}
