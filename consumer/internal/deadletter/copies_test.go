package deadletter

import (
	"errors"
	"slices"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// TestCopies: the copies of a dead letter, largest first; each
// carries keyshare's headers once, and the record's own headers named like
// keyshare's are renamed, in the copies only.
func TestCopies(t *testing.T) {
	topic := "orders"
	m := &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 3, Offset: 42},
		Key:            []byte("k"), Value: []byte("value"),
		Headers: []kafka.Header{{Key: "KEYSHARE.offset", Value: []byte("999")}, {Key: "trace", Value: []byte("t")}},
	}
	copies := Copies("orders.dlq", m, errors.New("boom"), 3)
	names := func(m *kafka.Message) []string {
		var out []string
		for _, h := range m.Headers {
			out = append(out, h.Key+"="+string(h.Value))
		}
		return out
	}
	ours := []string{"keyshare.topic=orders", "keyshare.partition=3", "keyshare.offset=42", "keyshare.error=boom", "keyshare.attempts=3"}
	theirs := []string{"original.KEYSHARE.offset=999", "trace=t"}
	for i, want := range []struct {
		key, value string
		headers    []string
	}{
		{"k", "value", slices.Concat(theirs, ours)},
		{"k", "", slices.Concat(theirs, ours, []string{"keyshare.dropped=value"})},
		{"", "", slices.Concat(ours, []string{"keyshare.dropped=key,value,headers"})},
	} {
		c := copies[i]
		if *c.TopicPartition.Topic != "orders.dlq" || c.TopicPartition.Partition != kafka.PartitionAny {
			t.Errorf("copy %d goes to %v", i, c.TopicPartition)
		}
		if string(c.Key) != want.key || string(c.Value) != want.value || !slices.Equal(names(c), want.headers) {
			t.Errorf("copy %d: key %q value %q headers %q; want %q %q %q", i, c.Key, c.Value, names(c), want.key, want.value, want.headers)
		}
	}
	if m.Headers[0].Key != "KEYSHARE.offset" {
		t.Errorf("the record's own header was renamed in place: %q", m.Headers[0].Key)
	}
}
