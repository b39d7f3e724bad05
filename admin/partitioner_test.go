package admin_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/testutil"
)

// TestPartitionMatchesTheProducer produces keys through librdkafka with
// each partitioner DescribeKey knows (its default, consistent_random, then
// "consistent" and "murmur2", the latter Java's algorithm) and checks that
// Partition computes the partition the broker stored each record in.
func TestPartitionMatchesTheProducer(t *testing.T) {
	testutil.ParallelOnKfake(t)
	const parts = 7
	k := testutil.StartKafka(t, map[string]int32{"keys": parts})
	keys := [][]byte{[]byte("a"), []byte("ab"), []byte("abc"), []byte("abcd"), []byte("héllo, wörld"), {0, 0xff, 0x80, 7, 9}}
	for i := range 40 {
		keys = append(keys, fmt.Appendf(nil, "key-%d", i))
	}
	for _, tc := range []struct {
		librdkafka string // "" for the default
		p          admin.Partitioner
	}{
		{"", admin.ConsistentRandom},
		{"consistent", admin.CRC32},
		{"murmur2", admin.Murmur2},
	} {
		t.Run(string(tc.p), func(t *testing.T) {
			cm := kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}
			if tc.librdkafka != "" {
				cm["partitioner"] = tc.librdkafka
			}
			p, err := kafka.NewProducer(&cm)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			topic := "keys"
			done := make(chan kafka.Event, len(keys))
			for _, key := range keys {
				if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Key: key, Value: []byte("v")}, done); err != nil {
					t.Fatal(err)
				}
			}
			spread := map[int32]bool{}
			for range keys {
				m := (<-done).(*kafka.Message)
				if m.TopicPartition.Error != nil {
					t.Fatal(m.TopicPartition.Error)
				}
				got, err := tc.p.Partition(m.Key, parts)
				if err != nil {
					t.Fatal(err)
				}
				if got != m.TopicPartition.Partition {
					t.Errorf("key %q: %s computes partition %d, the producer wrote %d", m.Key, tc.p, got, m.TopicPartition.Partition)
				}
				spread[got] = true
			}
			if len(spread) < 3 {
				t.Errorf("%d keys landed in %d partitions: not a test of the hash", len(keys), len(spread))
			}
		})
	}
}

func TestPartitionOfAnEmptyKey(t *testing.T) {
	t.Parallel()
	if _, err := admin.ConsistentRandom.Partition(nil, 4); !errors.Is(err, admin.ErrRandomPartition) {
		t.Errorf("consistent_random, empty key: got %v, want ErrRandomPartition", err)
	}
	if p, err := admin.CRC32.Partition([]byte{}, 4); err != nil || p != 0 {
		t.Errorf("crc32, empty key: got %d, %v; want partition 0 (CRC32 of nothing is 0)", p, err)
	}
	for _, bad := range []string{"", "random", "Murmur2"} {
		if _, err := admin.ParsePartitioner(bad); err == nil {
			t.Errorf("ParsePartitioner(%q) accepted", bad)
		}
	}
}

// TestMurmur2MatchesJava holds Murmur2 to the Java client's default
// partitioner, Utils.toPositive(Utils.murmur2(key)) % n, as kafka-clients
// 4.2.0 computed it for these keys (M.java calling
// org.apache.kafka.common.utils.Utils, run with
// java -cp "$HOME/.cache/keyshare/kafka-4.2.0/lib/*" M.java).
func TestMurmur2MatchesJava(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key         string
		of7, of1000 int32
	}{
		{"", 2, 681}, {"a", 5, 524}, {"ab", 0, 434}, {"abc", 4, 107}, {"abcd", 5, 100},
		{"héllo, wörld", 0, 861}, {"key-0", 0, 41}, {"key-3", 4, 547}, {"key-17", 2, 460}, {"customer-42", 1, 153},
	} {
		for n, want := range map[int32]int32{7: tc.of7, 1000: tc.of1000} {
			if got, err := admin.Murmur2.Partition([]byte(tc.key), n); err != nil || got != want {
				t.Errorf("murmur2 %q of %d partitions: got %d, %v; Java's client: %d", tc.key, n, got, err, want)
			}
		}
	}
}
