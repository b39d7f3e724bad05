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
