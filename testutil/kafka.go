package testutil

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/keyshare/keyshare/internal/devcluster"
)

// Kafka is the broker a test runs against: kfake, in the test process, or
// (KEYSHARE_KAFKA=apache) a real Apache Kafka broker shared by the tests of
// one test binary.
type Kafka struct {
	// Cluster is the kfake cluster; nil on the Apache backend. Tests that
	// need kfake's own features (faults, moving partitions) get it with
	// Fake, which skips the test on the Apache backend.
	*kfake.Cluster
	// Apache is the real broker; nil on the kfake backend.
	Apache  *ApacheKafka
	Brokers string // bootstrap address, host:port
}

// Backends of StartKafka, chosen by the environment variable KEYSHARE_KAFKA.
const (
	BackendKfake  = "kfake"  // default: franz-go's kfake, in process
	BackendApache = "apache" // Apache Kafka devcluster.ApacheKafkaVersion, one JVM per test binary
)

// KafkaBackend is the backend StartKafka uses: KEYSHARE_KAFKA, default
// kfake. `make test-kafka` sets KEYSHARE_KAFKA=apache.
func KafkaBackend() string {
	if v := os.Getenv("KEYSHARE_KAFKA"); v != "" {
		return v
	}
	return BackendKfake
}

// StartKafka starts a broker with the given topics and partition counts,
// closed or cleaned when the test ends.
//
// On the kfake backend it is a one-broker kfake cluster on a free port, new
// for each test. On the Apache backend every test of the binary shares one
// broker, started on first use (a JVM per test would cost seconds each):
// StartKafka empties it first (deletes every topic and consumer group), then
// creates the topics, so a test sees what it would see on a fresh broker as
// long as tests that use it do not run in parallel. extra kfake options
// skip the test on the Apache backend.
func StartKafka(t testing.TB, topics map[string]int32, extra ...kfake.Opt) *Kafka {
	t.Helper()
	switch b := KafkaBackend(); b {
	case BackendKfake:
	case BackendApache:
		if len(extra) > 0 {
			t.Skip("kfake options (faults, broker configs): this test needs the kfake broker")
		}
		a := sharedApache(t)
		resetKafka(t, a.Brokers())
		if err := a.CreateTopics(topics); err != nil {
			t.Fatalf("create topics on Apache Kafka: %v", err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("Apache Kafka %s broker log (kept when a test fails): %s", devcluster.ApacheKafkaVersion, a.LogFiles()[0])
			}
		})
		return &Kafka{Apache: a, Brokers: a.Brokers()}
	default:
		t.Fatalf("KEYSHARE_KAFKA=%q: want %q or %q", b, BackendKfake, BackendApache)
	}
	c, err := devcluster.StartKafka(devcluster.KafkaOptions{Topics: topics, Extra: extra})
	if err != nil {
		t.Fatalf("start kafka: %v", err)
	}
	t.Cleanup(c.Close)
	return &Kafka{Cluster: c, Brokers: c.ListenAddrs()[0]}
}

// Fake returns the kfake cluster, or skips the test on the Apache backend.
func (k *Kafka) Fake(t testing.TB) *kfake.Cluster {
	t.Helper()
	if k.Cluster == nil {
		t.Skip("kfake-only feature: this test needs the kfake broker")
	}
	return k.Cluster
}

// ParallelOnKfake runs t in parallel with the other parallel tests of its
// binary (t.Parallel) on the kfake backend, where StartKafka gives every
// test a broker of its own. On the Apache backend the tests share one
// broker, which StartKafka empties for each, so there they run one at a
// time. For tests that mostly wait (sessions, intervals, drains) and share
// nothing else: their etcd servers, ports and directories are their own.
func ParallelOnKfake(t *testing.T) {
	t.Helper()
	if KafkaBackend() == BackendKfake {
		t.Parallel()
	}
}

// RequireKfake skips the test unless the backend is kfake, saying why.
func RequireKfake(t testing.TB, why string) {
	t.Helper()
	if KafkaBackend() != BackendKfake {
		t.Skipf("kfake only: %s", why)
	}
}

// DeleteRecords moves the log start of topic/partition to offset, as
// retention would: through kfake directly, or the admin API of a real
// broker.
func (k *Kafka) DeleteRecords(topic string, partition int32, offset int64) error {
	if k.Cluster != nil {
		return k.Cluster.DeleteRecords(topic, partition, offset)
	}
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3})
	if err != nil {
		return err
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := a.DeleteRecords(ctx, []kafka.TopicPartition{{Topic: &topic, Partition: partition, Offset: kafka.Offset(offset)}})
	if err != nil {
		return fmt.Errorf("delete records of %s/%d below %d: %w", topic, partition, offset, err)
	}
	for _, r := range res.DeleteRecordsResults {
		if r.TopicPartition.Error != nil {
			return fmt.Errorf("delete records of %s/%d below %d: %w", topic, partition, offset, r.TopicPartition.Error)
		}
	}
	return nil
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
// order of records: records of one partition get offsets in the order
// given. The producer is idempotent for that. Without it librdkafka
// retries a batch that a just-created topic's partition refused (NOT_LEADER
// while the broker elects its leader) behind the batches sent after it, and
// a key's second record lands before its first.
func Produce(t testing.TB, brokers, topic string, records []Record) []kafka.TopicPartition {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers":  brokers,
		"linger.ms":          5,
		"acks":               "all",
		"enable.idempotence": true,
		"log_level":          3,
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
// topic, read with a separate consumer that never joins the group; a
// partition with no commit is absent from the map.
//
// Not with AdminClient.ListConsumerGroupOffsets: librdkafka (2.11.1 and
// earlier) crashes the process when a real broker answers that request with
// NOT_COORDINATOR, as Apache Kafka does while it loads a group's coordinator
// (confluentinc/librdkafka#5040; kfake never answers so). A consumer's
// Committed goes through the group code, which looks the coordinator up
// again.
func Committed(t testing.TB, brokers, group, topic string, n int32) map[int32]int64 {
	t.Helper()
	out, err := ReadCommitted(brokers, group, topic, n)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ReadCommitted is Committed for a goroutine other than the test's, which
// must not call t.Fatal: it returns the error instead.
func ReadCommitted(brokers, group, topic string, n int32) (map[int32]int64, error) {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": brokers, "group.id": group, "enable.auto.commit": false, "log_level": 3})
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	defer c.Close()
	tps := make([]kafka.TopicPartition, n)
	for p := range n {
		tps[p] = kafka.TopicPartition{Topic: &topic, Partition: p}
	}
	// A real broker answers NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS
	// while it moves or loads the group's coordinator: ask again.
	var res []kafka.TopicPartition
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err = c.Committed(tps, 20000)
		var kerr kafka.Error
		if !errors.As(err, &kerr) || !kerr.IsRetriable() && kerr.Code() != kafka.ErrNotCoordinator || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil && strings.Contains(err.Error(), "group id does not exist") {
		return map[int32]int64{}, nil // the group never committed
	}
	if err != nil {
		return nil, fmt.Errorf("committed offsets of group %q: %w", group, err)
	}
	out := make(map[int32]int64)
	for _, tp := range res {
		if tp.Error != nil {
			return nil, fmt.Errorf("committed offset of %s/%d: %w", topic, tp.Partition, tp.Error)
		}
		if tp.Offset >= 0 {
			out[tp.Partition] = int64(tp.Offset)
		}
	}
	return out, nil
}
