package statestore

import (
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/keystate"
)

// A changelog entry as a Kafka record, both ways: what the Store appends
// and reads, and what a tool or a test that writes or reads a changelog
// itself needs.

// EntryMessage returns the changelog record of e for partition of
// changelog topic: e's key, its value (null for a deletion, empty rather
// than null for an empty state) and keystate's headers.
func EntryMessage(topic string, partition int32, e keystate.Entry) *kafka.Message {
	m := &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: partition},
		Key:            e.Key,
		Value:          e.Value,
	}
	if !e.Deleted && m.Value == nil {
		m.Value = []byte{}
	}
	for _, h := range keystate.Headers(e) {
		m.Headers = append(m.Headers, kafka.Header{Key: h.Key, Value: h.Value})
	}
	return m
}

// DecodeMessage decodes changelog record m (keystate.Decode: strict, a
// *keystate.DecodeError naming the field).
func DecodeMessage(m *kafka.Message) (keystate.Entry, error) {
	hs := make([]keystate.Header, len(m.Headers))
	for i, h := range m.Headers {
		hs[i] = keystate.Header{Key: h.Key, Value: h.Value}
	}
	return keystate.Decode(m.Key, m.Value, m.Value == nil, hs)
}
