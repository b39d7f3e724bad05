package consumer_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

// produceMessages writes messages (with their headers) to partition 0 of
// topic, waiting for each delivery.
func produceMessages(t *testing.T, brokers, topic string, msgs []*kafka.Message) {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": brokers, "acks": "all", "enable.idempotence": true, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	done := make(chan kafka.Event, len(msgs))
	for _, m := range msgs {
		m.TopicPartition = kafka.TopicPartition{Topic: &topic, Partition: 0}
		if err := p.Produce(m, done); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	for range msgs {
		if m := (<-done).(*kafka.Message); m.TopicPartition.Error != nil {
			t.Fatalf("delivery: %v", m.TopicPartition.Error)
		}
	}
}

// readTopic reads the first n records of partition 0 of topic.
func readTopic(t *testing.T, brokers, topic string, n int) []*kafka.Message {
	t.Helper()
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": brokers, "group.id": "reader", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: 0}}); err != nil {
		t.Fatal(err)
	}
	var out []*kafka.Message
	for len(out) < n {
		m, err := c.ReadMessage(20 * time.Second)
		if err != nil {
			t.Fatalf("read %s: %d of %d records: %v", topic, len(out), n, err)
		}
		out = append(out, m)
	}
	return out
}

// headerValues lists the values of every header named name, in order.
func headerValues(m *kafka.Message, name string) []string {
	var out []string
	for _, h := range m.Headers {
		if h.Key == name {
			out = append(out, string(h.Value))
		}
	}
	return out
}

// TestOversizedDeadLetter: two records fail their handler and are too
// large for the dead-letter topic, one refused by the broker (the topic's
// max.message.bytes) and one by the producer itself (message.max.bytes).
// Each is tried exactly MaxAttempts times, then written to the dead-letter
// topic without its value, with a header saying so; the commit reaches the
// end.
func TestOversizedDeadLetter(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1, "orders.dlq": 1})
	cl.topics = []string{"orders"}
	setTopicConfig(t, k.Brokers, "orders.dlq", "max.message.bytes", "50000")
	logger, logs := captureLog(t)
	cl.mutate = func(c *consumer.Config) {
		c.DeadLetterTopic = "orders.dlq"
		c.Kafka["message.max.bytes"] = 150_000 // the dead-letter producer's own limit
		c.Retry = consumer.RetryPolicy{MaxAttempts: 2, Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
		c.Logger = logger
	}
	var mu sync.Mutex
	attempts := map[int64]int{}
	member := cl.start("m", func(_ context.Context, m *kafka.Message) error {
		if len(m.Value) < 10_000 {
			return nil
		}
		mu.Lock()
		attempts[int64(m.TopicPartition.Offset)]++
		mu.Unlock()
		return errors.New("cannot parse the order")
	})
	msgs := []*kafka.Message{
		{Key: []byte("big-for-the-broker"), Value: bytes.Repeat([]byte("b"), 60_000)},
		{Key: []byte("big-for-the-producer"), Value: bytes.Repeat([]byte("p"), 200_000), Headers: []kafka.Header{{Key: "trace", Value: []byte("t-1")}}},
	}
	for i := range 8 {
		msgs = append(msgs, &kafka.Message{Key: []byte("k" + strconv.Itoa(i)), Value: []byte("small")})
	}
	produceMessages(t, k.Brokers, "orders", msgs)

	waitFor(t, "the commit past both records", 20*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == int64(len(msgs))
	})
	mu.Lock()
	if attempts[0] != 2 || attempts[1] != 2 {
		t.Errorf("handler attempts per offset %v, want 2 each (Retry.MaxAttempts)", attempts)
	}
	mu.Unlock()
	for _, m := range readTopic(t, k.Brokers, "orders.dlq", 2) {
		off := headerValues(m, consumer.HeaderOffset)
		if len(off) != 1 || len(m.Value) != 0 || !slices.Equal(headerValues(m, consumer.HeaderDropped), []string{"value"}) {
			t.Errorf("dead letter: offset %v, %d value bytes, dropped %v; want one offset, no value, dropped [value]",
				off, len(m.Value), headerValues(m, consumer.HeaderDropped))
			continue
		}
		want := map[string]string{"0": "big-for-the-broker", "1": "big-for-the-producer"}[off[0]]
		if string(m.Key) != want {
			t.Errorf("dead letter of offset %s has key %q, want %q", off[0], m.Key, want)
		}
		if off[0] == "1" && !slices.Equal(headerValues(m, "trace"), []string{"t-1"}) {
			t.Errorf("dead letter of offset 1 lost its own header: %v", m.Headers)
		}
	}
	if n := logs.count("[ERROR]"); n > 0 {
		t.Errorf("%d ERROR lines about a dead letter that was written", n)
	}
	counters := map[string]float64{}
	mfs, err := member.c.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if len(mf.GetMetric()) == 1 && mf.GetMetric()[0].GetCounter() != nil {
			counters[mf.GetName()] = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	for name, want := range map[string]float64{"keyshare_dead_letters_reduced_total": 2, "keyshare_dead_letter_errors_total": 0, "keyshare_records_dead_lettered_total": 2} {
		if counters[name] != want {
			t.Errorf("%s = %v, want %v", name, counters[name], want)
		}
	}
}

// TestDeadLetterHeadersNotForged: a record that arrives with headers named
// like keyshare's own (keyshare.offset, keyshare.error) keeps them only
// under another name on its dead letter: a reader that takes the first
// header of each name reads keyshare's values.
func TestDeadLetterHeadersNotForged(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1, "orders.dlq": 1})
	cl.topics = []string{"orders"}
	cl.mutate = func(c *consumer.Config) {
		c.DeadLetterTopic = "orders.dlq"
		c.Retry = consumer.RetryPolicy{MaxAttempts: 1, Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	}
	cl.start("m", func(_ context.Context, m *kafka.Message) error {
		if string(m.Key) == "forged" {
			return errors.New("real error")
		}
		return nil
	})
	produceMessages(t, k.Brokers, "orders", []*kafka.Message{
		{Key: []byte("ok"), Value: []byte("v")},
		{Key: []byte("forged"), Value: []byte("v"), Headers: []kafka.Header{
			{Key: consumer.HeaderOffset, Value: []byte("999")},
			{Key: consumer.HeaderError, Value: []byte("nothing wrong")},
			{Key: "Keyshare.Attempts", Value: []byte("0")},
			{Key: "trace", Value: []byte("t-1")},
		}},
	})
	m := readTopic(t, k.Brokers, "orders.dlq", 1)[0]
	for name, want := range map[string][]string{
		consumer.HeaderOffset:               {"1"},
		consumer.HeaderError:                {"real error"},
		consumer.HeaderAttempts:             {"1"},
		consumer.HeaderTopic:                {"orders"},
		"trace":                             {"t-1"},
		"original." + consumer.HeaderOffset: {"999"},
		"original." + consumer.HeaderError:  {"nothing wrong"},
		"original.Keyshare.Attempts":        {"0"},
	} {
		if got := headerValues(m, name); !slices.Equal(got, want) {
			t.Errorf("header %s: %q, want %q", name, got, want)
		}
	}
	for _, h := range m.Headers {
		if strings.HasPrefix(strings.ToLower(h.Key), "keyshare.") && h.Key != strings.ToLower(h.Key) {
			t.Errorf("header %s: a name like keyshare's own, from the record", h.Key)
		}
	}
}
