package consumer_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

// TestBackpressureBoundsInFlightBytes: records of 200 KB, each held by
// its handler, fill MaxInFlightBytes (1 MiB) long before MaxInFlight (the
// default, 1000): the member stops taking records at the byte bound and
// pauses its partition, holding no more than the bound plus one record,
// which keyshare_in_flight_bytes shows. Released, every record finishes.
func TestBackpressureBoundsInFlightBytes(t *testing.T) {
	testutil.ParallelOnKfake(t)
	const bound, size, n = 1 << 20, 200_000, 40
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	cl.mutate = func(c *consumer.Config) {
		c.MaxInFlightBytes = bound
		c.MetricsAddr = "127.0.0.1:0"
	}
	release := make(chan struct{})
	h := newHistory(t)
	inner := h.handler("m", 0)
	m := cl.start("m", func(ctx context.Context, msg *kafka.Message) error {
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return inner(ctx, msg)
	})
	recs := make([]testutil.Record, n)
	for i := range recs {
		recs[i] = testutil.Record{Key: fmt.Appendf(nil, "key-%d", i), Value: bytes.Repeat([]byte{'v'}, size)}
	}
	produced := testutil.Produce(t, k.Brokers, "orders", recs)
	maxRecords, maxBytes := 0, int64(0)
	observe := func() consumer.Status {
		st := m.c.Status()
		maxRecords, maxBytes = max(maxRecords, st.InFlight), max(maxBytes, st.InFlightBytes)
		return st
	}
	waitFor(t, "the partition paused at the byte bound", 20*time.Second, func() bool { return observe().Paused })
	for range 20 {
		observe()
		time.Sleep(10 * time.Millisecond)
	}
	gauge := scrape(t, m.c.MetricsAddr())["keyshare_in_flight_bytes"]
	t.Logf("in flight at most %d records, %d bytes; gauge %v", maxRecords, maxBytes, gauge)
	if limit := int64(bound + size + 100); maxBytes > limit || maxRecords > bound/size+1 {
		t.Fatalf("in flight reached %d records, %d bytes: bound %d bytes (plus one record)", maxRecords, maxBytes, bound)
	}
	if gauge < size || gauge > float64(maxBytes) {
		t.Errorf("keyshare_in_flight_bytes = %v, want the bytes held (at most %d)", gauge, maxBytes)
	}
	close(release)
	waitFor(t, "all records", 30*time.Second, func() bool { return h.count() == n })
	h.check(produced)
}
