package testutil

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/keyshare/keyshare/internal/devcluster"
)

// Kafka is an in-process Kafka-protocol broker started for one test.
type Kafka struct {
	*kfake.Cluster
	Brokers string // bootstrap address, host:port
}

// StartKafka starts a one-broker kfake cluster on a free port with the given
// topics and partition counts. It is closed when the test ends.
func StartKafka(t testing.TB, topics map[string]int32, extra ...kfake.Opt) *Kafka {
	t.Helper()
	c, err := devcluster.StartKafka(devcluster.KafkaOptions{Topics: topics, Extra: extra})
	if err != nil {
		t.Fatalf("start kafka: %v", err)
	}
	t.Cleanup(c.Close)
	return &Kafka{Cluster: c, Brokers: c.ListenAddrs()[0]}
}

// Record is a record to produce.
type Record struct {
	Key       []byte // nil produces a null key
	Value     []byte
	Partition int32 // kafka.PartitionAny (-1) lets librdkafka's partitioner choose
}

// KeyedRecords returns n records over the given number of keys ("key-0",
// "key-1", ...), each value "key-k:seq" with seq counting that key's records
// from 0, all for partition 0.
func KeyedRecords(n, keys int) []Record {
	seq := make([]int, keys)
	out := make([]Record, n)
	for i := range out {
		k := i % keys
		out[i] = Record{
			Key:   fmt.Appendf(nil, "key-%d", k),
			Value: fmt.Appendf(nil, "key-%d:%d", k, seq[k]),
		}
		seq[k]++
	}
	return out
}

// Produce writes records through a confluent-kafka-go producer and waits for
// every delivery report. It returns the offsets the broker assigned, in the
// order of records.
func Produce(t testing.TB, brokers, topic string, records []Record) []kafka.TopicPartition {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers": brokers,
		"linger.ms":         5,
		"acks":              "all",
		"log_level":         3,
	})
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	defer p.Close()
	done := make(chan kafka.Event, len(records))
	for i, r := range records {
		msg := &kafka.Message{
			TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: r.Partition},
			Key:            r.Key,
			Value:          r.Value,
			Opaque:         i,
		}
		if err := p.Produce(msg, done); err != nil {
			t.Fatalf("produce record %d: %v", i, err)
		}
	}
	out := make([]kafka.TopicPartition, len(records))
	timeout := time.After(60 * time.Second)
	for range records {
		select {
		case ev := <-done:
			m := ev.(*kafka.Message)
			if m.TopicPartition.Error != nil {
				t.Fatalf("delivery of record %v: %v", m.Opaque, m.TopicPartition.Error)
			}
			out[m.Opaque.(int)] = m.TopicPartition
		case <-timeout:
			t.Fatalf("produce: delivery reports not in after 60s")
		}
	}
	return out
}

// Committed returns the group's committed offsets for partitions 0..n-1 of
// topic, read with a separate admin client; a partition with no commit is
// absent from the map.
func Committed(t testing.TB, brokers, group, topic string, n int32) map[int32]int64 {
	t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": brokers, "log_level": 3})
	if err != nil {
		t.Fatalf("admin client: %v", err)
	}
	defer a.Close()
	tps := make([]kafka.TopicPartition, n)
	for p := range n {
		tps[p] = kafka.TopicPartition{Topic: &topic, Partition: p}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := a.ListConsumerGroupOffsets(ctx, []kafka.ConsumerGroupTopicPartitions{{Group: group, Partitions: tps}})
	if err != nil && strings.Contains(err.Error(), "group id does not exist") {
		return map[int32]int64{} // the group never committed
	}
	if err != nil {
		t.Fatalf("list committed offsets of group %q: %v", group, err)
	}
	out := make(map[int32]int64)
	for _, g := range res.ConsumerGroupsTopicPartitions {
		for _, tp := range g.Partitions {
			if tp.Error != nil {
				t.Fatalf("committed offset of %s/%d: %v", topic, tp.Partition, tp.Error)
			}
			if tp.Offset >= 0 {
				out[tp.Partition] = int64(tp.Offset)
			}
		}
	}
	return out
}
