package keyops

import (
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer/internal/deadletter"
)

// TestParkedOf: a prelude takes from the parking partition only the
// records parked from its key's topic and partition, and hands each to the
// handler at its origin's place; a record without keyshare's origin
// headers, of another key, topic or partition is passed over.
func TestParkedOf(t *testing.T) {
	t.Parallel()
	parking := "orders.keyshare-parked"
	parked := func(key string, hs ...string) *kafka.Message {
		m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &parking, Partition: 3, Offset: 9}, Key: []byte(key)}
		for i := 0; i+1 < len(hs); i += 2 {
			m.Headers = append(m.Headers, kafka.Header{Key: hs[i], Value: []byte(hs[i+1])})
		}
		return m
	}
	m := parked("k", "trace", "t-1", deadletter.HeaderTopic, "orders", deadletter.HeaderPartition, "3", deadletter.HeaderOffset, "42")
	if !ParkedOf(m, "orders", 3, []byte("k")) {
		t.Fatal("a record parked from the key's partition passed over")
	}
	if tpm := m.TopicPartition; *tpm.Topic != "orders" || tpm.Partition != 3 || tpm.Offset != 42 {
		t.Errorf("handed to the handler at %v, want orders/3 at 42", tpm)
	}
	for name, m := range map[string]*kafka.Message{
		"another key":          parked("k2", deadletter.HeaderTopic, "orders", deadletter.HeaderPartition, "3", deadletter.HeaderOffset, "42"),
		"another topic":        parked("k", deadletter.HeaderTopic, "payments", deadletter.HeaderPartition, "3", deadletter.HeaderOffset, "42"),
		"another partition":    parked("k", deadletter.HeaderTopic, "orders", deadletter.HeaderPartition, "4", deadletter.HeaderOffset, "42"),
		"no origin offset":     parked("k", deadletter.HeaderTopic, "orders", deadletter.HeaderPartition, "3"),
		"a bad origin offset":  parked("k", deadletter.HeaderTopic, "orders", deadletter.HeaderPartition, "3", deadletter.HeaderOffset, "x"),
		"a producer's headers": parked("k", deadletter.RenamedHeaderPrefix+deadletter.HeaderTopic, "orders", deadletter.RenamedHeaderPrefix+deadletter.HeaderPartition, "3", deadletter.RenamedHeaderPrefix+deadletter.HeaderOffset, "42"),
	} {
		if ParkedOf(m, "orders", 3, []byte("k")) {
			t.Errorf("%s: taken by the prelude", name)
		}
	}
	if ParkedOf(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &parking}}, "orders", 3, []byte{}) {
		t.Error("a null key taken as the empty key")
	}
}

// TestReplayBound: a replay stops at the key's live record about to run;
// with none running, at the fetch position unless a record of the key is
// queued (its worker decides) or the position is unknown; never below its
// progress.
func TestReplayBound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		live       int64
		dispatched bool
		pos        int64
		known      bool
		next       int64
		want       int64
		ok         bool
	}{
		{"the live record about to run", 40, true, 90, true, 5, 40, true},
		{"the live record, the position unknown", 40, false, 0, false, 5, 40, true},
		{"no live record: the fetch position", -1, false, 90, true, 5, 90, true},
		{"a record of the key queued: its worker decides", -1, true, 90, true, 5, 0, false},
		{"the position not known yet", -1, false, 0, false, 5, 0, false},
		{"never below the progress", 3, true, 0, false, 5, 5, true},
		{"never below the progress, from the position", -1, false, 4, true, 5, 5, true},
	} {
		got, ok := ReplayBound(tc.live, tc.dispatched, tc.pos, tc.known, tc.next)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: ReplayBound = %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestParkedCopy: a parked copy goes to the partition of the same number,
// keeps the record's key, value, timestamp and headers (keyshare's names
// renamed), and carries its origin and fencing token, which ParkedOf and
// ParkedFence read back.
func TestParkedCopy(t *testing.T) {
	topic := "orders"
	m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 3, Offset: 42}, Key: []byte("k"), Value: []byte("v"),
		Headers: []kafka.Header{{Key: deadletter.HeaderOffset, Value: []byte("999")}}}
	c := ParkedCopy("orders.parked", m, 17)
	if *c.TopicPartition.Topic != "orders.parked" || c.TopicPartition.Partition != 3 || string(c.Key) != "k" || string(c.Value) != "v" {
		t.Fatalf("parked as %v key %q value %q, want orders.parked/3 with the record's key and value", c.TopicPartition, c.Key, c.Value)
	}
	if got := deadletter.HeaderValue(c, deadletter.RenamedHeaderPrefix+deadletter.HeaderOffset); got != "999" {
		t.Errorf("the record's own keyshare.offset header is %q on the copy, want it renamed with its value 999", got)
	}
	if token, ok := ParkedFence(c); !ok || token != 17 {
		t.Errorf("fence %d, %v; want 17", token, ok)
	}
	if !ParkedOf(c, "orders", 3, []byte("k")) || c.TopicPartition.Offset != 42 || *c.TopicPartition.Topic != "orders" {
		t.Errorf("the copy read back at %v, want orders/3 at 42", c.TopicPartition)
	}
	if _, ok := ParkedFence(m); ok {
		t.Error("a record with no fence header has a fence")
	}
}
