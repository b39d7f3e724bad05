package keyops

import (
	"strconv"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer/internal/deadletter"
)

// ParkedCopy is m as it is parked in topic: the same partition number,
// key, value and headers (keyshare's own renamed, as on a dead letter),
// keyshare's origin headers, and the fencing token of the range the
// member parks it under.
func ParkedCopy(topic string, m *kafka.Message, token int64) *kafka.Message {
	ours := []kafka.Header{
		{Key: deadletter.HeaderTopic, Value: []byte(*m.TopicPartition.Topic)},
		{Key: deadletter.HeaderPartition, Value: []byte(strconv.Itoa(int(m.TopicPartition.Partition)))},
		{Key: deadletter.HeaderOffset, Value: []byte(strconv.FormatInt(int64(m.TopicPartition.Offset), 10))},
		{Key: deadletter.HeaderFence, Value: []byte(strconv.FormatInt(token, 10))},
	}
	hs := deadletter.RenameOurs(m.Headers)
	return &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: m.TopicPartition.Partition},
		Key: m.Key, Value: m.Value, Headers: append(hs, ours...), Timestamp: m.Timestamp}
}

// ParkedFence is the fencing token a parked copy was written under, if it
// carries one (copies parked by releases before HeaderFence carry none).
func ParkedFence(m *kafka.Message) (int64, bool) {
	token, err := strconv.ParseInt(deadletter.HeaderValue(m, deadletter.HeaderFence), 10, 64)
	return token, err == nil
}

// ParkedOf reports whether m, read from a parking topic, is a parked
// record of key from topic/partition, and if so gives it its origin's
// place.
func ParkedOf(m *kafka.Message, topic string, partition int32, key []byte) bool {
	if m.Key == nil || string(m.Key) != string(key) || deadletter.HeaderValue(m, deadletter.HeaderTopic) != topic ||
		deadletter.HeaderValue(m, deadletter.HeaderPartition) != strconv.Itoa(int(partition)) {
		return false
	}
	o, err := strconv.ParseInt(deadletter.HeaderValue(m, deadletter.HeaderOffset), 10, 64)
	if err != nil {
		return false
	}
	m.TopicPartition = kafka.TopicPartition{Topic: &topic, Partition: partition, Offset: kafka.Offset(o)}
	return true
}

// ReplayBound is where a replay that has no bound yet stops: at the key's
// next live record, the one about to run (live; -1 for none), or with no
// record of the key dispatched, pos: the partition's next fetch position
// (every record of the key below it is handled) or, if higher, where the
// range's ledger has seen no record (below it the replay stops earlier, at
// the key's first record not handled); never below the replay's progress
// next. ok is false when the bound is not this caller's to set: a record
// of the key is queued (its worker sets it) or the position is not known
// yet.
func ReplayBound(live int64, dispatched bool, pos int64, known bool, next int64) (bound int64, ok bool) {
	switch {
	case live >= 0:
		return max(live, next), true
	case dispatched || !known:
		return 0, false
	}
	return max(pos, next), true
}
