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
