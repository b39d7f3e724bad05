package loadgen

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/testutil"
)

// TestProduceCancelledCountsWhatItWrote: a run whose context ends midway
// (Ctrl-C on keyshare produce) stops producing, waits for the reports of
// the records it handed to the producer, and says how many the brokers
// took: exactly the records in the topic, and the context's error, not a
// report count that waits for records never sent.
func TestProduceCancelledCountsWhatItWrote(t *testing.T) {
	k := testutil.StartKafka(t, map[string]int32{"orders": 2})
	ctx, cancel := context.WithCancel(t.Context())
	o := Options{Count: 100_000, Keys: 10, Rate: 500, Seed: 1,
		Progress: NoProgress}
	go func() { time.Sleep(time.Second); cancel() }()
	res, err := ProduceWith(ctx, kafka.ConfigMap{"bootstrap.servers": k.Brokers, "acks": "all", "enable.idempotence": true, "linger.ms": 5, "log_level": 3}, "orders", o)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("ProduceWith after its context ended: %v (acked %d), want context.Canceled", err, res.Acked)
	}
	if res.Acked == 0 || res.Acked >= o.Count {
		t.Fatalf("acked %d of %d, want some and not all", res.Acked, o.Count)
	}
	if in := recordsIn(t, k.Brokers, "orders", 2); in != int64(res.Acked) {
		t.Fatalf("acked %d, but the topic holds %d records", res.Acked, in)
	}
}

// recordsIn is the number of records in the topic's n partitions.
func recordsIn(t *testing.T, brokers, topic string, n int32) int64 {
	t.Helper()
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": brokers, "group.id": "count", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var sum int64
	for p := range n {
		lo, hi, err := c.QueryWatermarkOffsets(topic, p, 10_000)
		if err != nil {
			t.Fatal(err)
		}
		sum += hi - lo
	}
	return sum
}
