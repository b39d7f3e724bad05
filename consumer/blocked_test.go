package consumer_test

import (
	"context"
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
