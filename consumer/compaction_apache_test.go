package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

// TestCompactedPendingRecordApache is TestCompactedPendingRecord on a real
// broker, whose log cleaner runs on its own: a range's records are pending
// (its owner never finished key-7) when the owner leaves; Kafka's log
// cleaner then removes them, and every other record of the first
// thousand, because later records of the same keys supersede them. The next
// owner seeks to the first of them and never receives it: it handles what
// is still in the log, and the committed offset reaches the end across the
// gaps.
//
// To make the cleaner run within the test: segments roll after 100 ms
// (segment.ms; the records are written in three rounds more than 100 ms
// apart, since a segment rolls on the first append after segment.ms), any
// dirty share is worth cleaning (min.cleanable.dirty.ratio 0.01), and the
// cleaner looks for work every 200 ms instead of 15 s (log.cleaner.backoff.ms,
// a dynamic broker config).
func TestCompactedPendingRecordApache(t *testing.T) {
	if testutil.KafkaBackend() != testutil.BackendApache {
		t.Skip("needs a real broker's log cleaner (KEYSHARE_KAFKA=apache); TestCompactedPendingRecord covers kfake")
	}
	const topic = "compacted-real"
	cl, k := newCluster(t, map[string]int32{topic: 1})
	alterConfigs(t, k.Brokers, kafka.ResourceTopic, topic, map[string]string{
		"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0",
	})
	// A per-broker dynamic config (librdkafka refuses the cluster-wide
	// default's empty name); the shared broker is node 1.
	alterConfigs(t, k.Brokers, kafka.ResourceBroker, "1", map[string]string{"log.cleaner.backoff.ms": "200"})
	t.Cleanup(func() { // the broker is shared by the binary's tests
		alterConfigs(t, k.Brokers, kafka.ResourceBroker, "1", map[string]string{"log.cleaner.backoff.ms": "15000"})
	})
	cl.mutate = func(c *consumer.Config) { c.DrainTimeout = time.Second }
	h := newHistory(t)
	inner := h.handler("a", 0)
	a := cl.start("a", func(ctx context.Context, m *kafka.Message) error {
		if string(m.Key) == "key-7" {
			<-ctx.Done() // key-7 stays pending
			return ctx.Err()
		}
		return inner(ctx, m)
	})
	// A first record no later one supersedes keeps the log start at 0.
	testutil.Produce(t, k.Brokers, topic, []testutil.Record{{Key: []byte("first"), Value: []byte("first:0")}})
	recs := testutil.KeyedRecords(1100, 100)
	first := testutil.Produce(t, k.Brokers, topic, recs[:1000])
	waitFor(t, "every key but key-7 handled", 30*time.Second, func() bool { return h.count() == 1+1000-10 })
	a.stop(t)

	// One more record per key, in a segment of their own, then "last" in
	// the next: the segment before the active one holds the latest record
	// of every key, so the cleaner may remove all of the first thousand.
	time.Sleep(300 * time.Millisecond)
	later := testutil.Produce(t, k.Brokers, topic, recs[1000:])
	time.Sleep(300 * time.Millisecond)
	later = append(later, testutil.Produce(t, k.Brokers, topic, []testutil.Record{{Key: []byte("last"), Value: []byte("last:0")}})...)
	end := int64(later[len(later)-1].Offset) + 1

	var inLog map[int64]bool
	cleaned := func() bool {
		for i, tp := range first {
			if string(recs[i].Key) == "key-7" && inLog[int64(tp.Offset)] {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(60 * time.Second)
	for inLog = logOffsets(t, k.Brokers, topic); !cleaned(); inLog = logOffsets(t, k.Brokers, topic) {
		if time.Now().After(deadline) {
			t.Fatalf("the log cleaner left key-7's records in the log for 60 s (%d records in the log)", len(inLog))
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("after compaction %d of %d records are in the log", len(inLog), end)
	if !inLog[0] {
		t.Fatal("compaction removed the first record, which nothing supersedes")
	}

	b := cl.start("b", h.handler("b", 0))
	waitFor(t, "the committed offset reaches the log end", 60*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, cl.group, topic, 1)[0] == end
	})
	for o := range inLog {
		if o >= int64(first[0].Offset) && !h.handledOffset(topic, o) {
			t.Errorf("record %d, in the log, never handled", o)
		}
	}
	for i, tp := range first {
		if string(recs[i].Key) == "key-7" && h.handledOffset(topic, int64(tp.Offset)) {
			t.Errorf("key-7's record %d handled after it was compacted away", tp.Offset)
		}
	}
	for _, e := range h.orderErrs {
		t.Error(e)
	}
	if n := b.c.Status().RetentionLosses; n != 0 {
		t.Errorf("%d retention loss reports; compaction loses nothing", n)
	}
}

// alterConfigs sets configs of one resource (a topic; for a broker, name is
// the node id) through the admin API.
func alterConfigs(t *testing.T, brokers string, typ kafka.ResourceType, name string, configs map[string]string) {
	t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": brokers, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var entries []kafka.ConfigEntry
	for k, v := range configs {
		entries = append(entries, kafka.ConfigEntry{Name: k, Value: v, IncrementalOperation: kafka.AlterConfigOpTypeSet})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := a.IncrementalAlterConfigs(ctx, []kafka.ConfigResource{{Type: typ, Name: name, Config: entries}})
	if err != nil {
		t.Fatalf("set %v on %v %q: %v", configs, typ, name, err)
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			t.Fatalf("set %v on %v %q: %v", configs, typ, name, r.Error)
		}
	}
}
