package consumer

import (
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// TestParkedOf: a prelude takes from the parking partition only the
// records parked from its key's topic and partition, and hands each to the
// handler at its origin's place; a record without keyshare's origin
// headers, of another key, topic or partition is passed over.
func TestParkedOf(t *testing.T) {
	t.Parallel()
	parking := "orders.keyshare-parked"
	origin := tp{Topic: "orders", Partition: 3}
	parked := func(key string, hs ...string) *kafka.Message {
		m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &parking, Partition: 3, Offset: 9}, Key: []byte(key)}
		for i := 0; i+1 < len(hs); i += 2 {
			m.Headers = append(m.Headers, kafka.Header{Key: hs[i], Value: []byte(hs[i+1])})
		}
		return m
	}
	m := parked("k", "trace", "t-1", HeaderTopic, "orders", HeaderPartition, "3", HeaderOffset, "42")
	if !parkedOf(m, origin, []byte("k")) {
		t.Fatal("a record parked from the key's partition passed over")
	}
	if tpm := m.TopicPartition; *tpm.Topic != "orders" || tpm.Partition != 3 || tpm.Offset != 42 {
		t.Errorf("handed to the handler at %v, want orders/3 at 42", tpm)
	}
	for name, m := range map[string]*kafka.Message{
		"another key":          parked("k2", HeaderTopic, "orders", HeaderPartition, "3", HeaderOffset, "42"),
		"another topic":        parked("k", HeaderTopic, "payments", HeaderPartition, "3", HeaderOffset, "42"),
		"another partition":    parked("k", HeaderTopic, "orders", HeaderPartition, "4", HeaderOffset, "42"),
		"no origin offset":     parked("k", HeaderTopic, "orders", HeaderPartition, "3"),
		"a bad origin offset":  parked("k", HeaderTopic, "orders", HeaderPartition, "3", HeaderOffset, "x"),
		"a producer's headers": parked("k", RenamedHeaderPrefix+HeaderTopic, "orders", RenamedHeaderPrefix+HeaderPartition, "3", RenamedHeaderPrefix+HeaderOffset, "42"),
	} {
		if parkedOf(m, origin, []byte("k")) {
			t.Errorf("%s: taken by the prelude", name)
		}
	}
	if parkedOf(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &parking}}, origin, []byte{}) {
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
		got, ok := replayBound(tc.live, tc.dispatched, tc.pos, tc.known, tc.next)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: replayBound = %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
