// Package statestoretest reads a group's keyed state back from its
// changelog for tests: a plain Kafka consumer, statestore's record decoding
// and keystate's restore rule, not the Store's reader under test, so that
// a check of a member's state does not trust the member's own reader.
package statestoretest

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/keystate"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/statestore"
)

// States reads partitions 0 to partitions-1 of changelog on brokers from
// their start to their end, as a restore of every range would, and returns
// each key's state; a deleted key is left out.
func States(t testing.TB, brokers, changelog string, partitions int32) map[string][]byte {
	t.Helper()
	out := make(map[string][]byte)
	for p := range partitions {
		rs, err := keystate.NewRestore(ledger.Full, keystate.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range readPartition(t, brokers, changelog, p) {
			e, err := statestore.DecodeMessage(m)
			if err != nil {
				t.Fatalf("changelog %s/%d offset %d: %v", changelog, p, m.TopicPartition.Offset, err)
			}
			if err := rs.Add(e); err != nil {
				t.Fatal(err)
			}
		}
		table, _, err := rs.Table(math.MaxInt64)
		if err != nil {
			t.Fatal(err)
		}
		for e := range table.All() {
			if !e.Deleted {
				out[string(e.Key)] = e.Value
			}
		}
	}
	return out
}

// Counts is States for states that are decimal counts.
func Counts(t testing.TB, brokers, changelog string, partitions int32) map[string]int {
	t.Helper()
	out := make(map[string]int)
	for k, v := range States(t, brokers, changelog, partitions) {
		n, err := strconv.Atoi(string(v))
		if err != nil {
			t.Fatalf("key %s's state %q is not a count", k, v)
		}
		out[k] = n
	}
	return out
}

// readPartition reads partition p of topic from its start to its end.
func readPartition(t testing.TB, brokers, topic string, p int32) []*kafka.Message {
	t.Helper()
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": brokers, "group.id": "statestoretest", "log_level": 3, "enable.auto.commit": false})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lo, end, err := c.QueryWatermarkOffsets(topic, p, 10_000)
	if err != nil {
		t.Fatalf("%s/%d's end offset: %v", topic, p, err)
	}
	if end <= lo {
		return nil
	}
	if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: p, Offset: kafka.Offset(lo)}}); err != nil {
		t.Fatal(err)
	}
	var out []*kafka.Message
	deadline := time.Now().Add(30 * time.Second)
	for next := lo; next < end; {
		if time.Now().After(deadline) {
			t.Fatalf("read %s/%d: at offset %d of %d after 30s", topic, p, next, end)
		}
		m, ok := c.Poll(100).(*kafka.Message)
		if !ok {
			continue
		}
		if m.TopicPartition.Error != nil {
			t.Fatalf("read %s/%d: %v", topic, p, m.TopicPartition.Error)
		}
		out = append(out, m)
		next = int64(m.TopicPartition.Offset) + 1
	}
	return out
}
