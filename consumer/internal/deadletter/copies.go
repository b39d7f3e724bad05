package deadletter

import (
	"errors"
	"slices"
	"strconv"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/internal/textsafe"
)

// Copies returns the dead letters of m for topic, to try in turn: the
// whole record, then without its value, then keyshare's headers alone.
// Each carries keyshare's headers; the record's own headers have
// keyshare's names renamed (RenameOurs).
func Copies(topic string, m *kafka.Message, cause error, attempts int) []*kafka.Message {
	ours := []kafka.Header{
		{Key: HeaderTopic, Value: []byte(*m.TopicPartition.Topic)},
		{Key: HeaderPartition, Value: []byte(strconv.Itoa(int(m.TopicPartition.Partition)))},
		{Key: HeaderOffset, Value: []byte(strconv.FormatInt(int64(m.TopicPartition.Offset), 10))},
		{Key: HeaderError, Value: []byte(textsafe.Escape(cause.Error()))},
		{Key: HeaderAttempts, Value: []byte(strconv.Itoa(attempts))},
	}
	theirs := RenameOurs(m.Headers)
	to := kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}
	dropped := func(what string) kafka.Header { return kafka.Header{Key: HeaderDropped, Value: []byte(what)} }
	return []*kafka.Message{
		{TopicPartition: to, Key: m.Key, Value: m.Value, Headers: append(slices.Clone(theirs), ours...)},
		{TopicPartition: to, Key: m.Key, Headers: append(append(slices.Clone(theirs), ours...), dropped("value"))},
		{TopicPartition: to, Headers: append(slices.Clone(ours), dropped("key,value,headers"))},
	}
}

// tooLarge reports whether err says a record is too large: the producer's
// own check against message.max.bytes, or the broker's against the topic's
// max.message.bytes.
func tooLarge(err error) bool {
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return false
	}
	switch ke.Code() {
	case kafka.ErrMsgSizeTooLarge, kafka.ErrRecordListTooLarge:
		return true
	}
	return false
}
