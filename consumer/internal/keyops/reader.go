package keyops

import (
	"context"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"
)

// Source is what a Reader asks of librdkafka: the calls of one
// *kafka.Consumer in assign mode that reads one partition.
type Source interface {
	Assign(partitions []kafka.TopicPartition) error
	Poll(timeoutMs int) kafka.Event
	QueryWatermarkOffsets(topic string, partition int32, timeoutMs int) (low, high int64, err error)
	Close() error
}

// Reader reads one partition from an offset to stop, or with stop -1, to
// its end: an unpark's parking partition (to its end, records parked
// meanwhile included) or a replay's origin (to the replay's bound).
type Reader struct {
	src       Source
	log       hclog.Logger
	topic     string
	partition int32
	pos       int64 // the next offset to read
	end       int64 // the partition's end as last queried
	stop      int64
}

// ReaderConfig is the librdkafka consumer's configuration of a Reader:
// the member's Kafka settings with group as group.id, never joined nor
// committed (Assign only), and records deleted before they were read
// reported rather than skipped quietly (auto.offset.reset=error; Next).
func ReaderConfig(user kafka.ConfigMap, group string) kafka.ConfigMap {
	cm := kafka.ConfigMap{}
	for k, v := range user {
		cm[k] = v
	}
	cm["group.id"] = group
	cm["enable.auto.commit"] = false
	cm["enable.auto.offset.store"] = false
	cm["enable.partition.eof"] = true
	cm["auto.offset.reset"] = "error"
	delete(cm, "go.logs.channel.enable")
	return cm
}

// OpenReader opens a librdkafka consumer with cm (ReaderConfig) and reads
// topic/partition from from to stop (-1: its end), logging to log what it
// cannot read.
func OpenReader(cm kafka.ConfigMap, log hclog.Logger, topic string, partition int32, from, stop int64) (*Reader, error) {
	kc, err := kafka.NewConsumer(&cm)
	if err != nil {
		return nil, fmt.Errorf("consumer: a reader of %s/%d: %w", topic, partition, err)
	}
	return NewReader(kc, log, topic, partition, from, stop)
}

// NewReader reads topic/partition from from to stop (-1: its end) with
// src, which it closes if the partition cannot be assigned.
func NewReader(src Source, log hclog.Logger, topic string, partition int32, from, stop int64) (*Reader, error) {
	if err := src.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: partition, Offset: kafka.Offset(from)}}); err != nil {
		_ = src.Close()
		return nil, fmt.Errorf("consumer: read %s/%d: %w", topic, partition, err)
	}
	return &Reader{src: src, log: log, topic: topic, partition: partition, pos: from, end: -1, stop: stop}, nil
}

// Close closes the reader's consumer.
func (r *Reader) Close() { _ = r.src.Close() }

// Pos is the next offset the reader reads.
func (r *Reader) Pos() int64 { return r.pos }

// Next returns the next record, or nil at the partition's end (queried
// again each time it is reached: records parked meanwhile are read) or
// at stop. A replay whose records were deleted before it read them ends
// with a *RecordsDeletedError.
func (r *Reader) Next(ctx context.Context) (*kafka.Message, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if r.stop >= 0 && r.pos >= r.stop {
			return nil, nil
		}
		if r.end < 0 || r.pos >= r.end {
			_, high, err := r.src.QueryWatermarkOffsets(r.topic, r.partition, 10_000)
			if err != nil {
				return nil, fmt.Errorf("consumer: the end of %s/%d: %w", r.topic, r.partition, err)
			}
			r.end = high
			if r.pos >= r.end {
				return nil, nil
			}
		}
		switch e := r.src.Poll(100).(type) {
		case *kafka.Message:
			if e.TopicPartition.Error != nil {
				return nil, e.TopicPartition.Error
			}
			o := int64(e.TopicPartition.Offset)
			if o < r.pos {
				continue
			}
			if r.stop >= 0 && o >= r.stop {
				r.pos = r.stop
				return nil, nil
			}
			r.pos = o + 1
			return e, nil
		case kafka.PartitionEOF:
			// Transaction markers take offsets no record has.
			r.pos = max(r.pos, int64(e.Offset))
		case kafka.Error:
			if e.IsFatal() {
				return nil, e
			}
			if e.Code() == kafka.ErrAutoOffsetReset {
				if err := r.skipDeleted(); err != nil {
					return nil, err
				}
			}
		}
	}
}

// RecordsDeletedError: records a replay was to read again were deleted
// (retention, or a DeleteRecords) before it read them.
type RecordsDeletedError struct {
	Topic      string
	Partition  int32
	From, UpTo int64 // [From, UpTo): UpTo is the log start
}

func (e *RecordsDeletedError) Error() string {
	return fmt.Sprintf("records %d to %d of %s/%d were deleted (retention or a deletion) before the replay read them: "+
		"replay from %d or later (keyshare key cancel, then keyshare key replay --from %d)", e.From, e.UpTo-1, e.Topic, e.Partition, e.UpTo, e.UpTo)
}

// skipDeleted handles the records from r.pos deleted (retention, or a
// DeleteRecords) before they were read. A replay (a reader with a stop)
// ends with a *RecordsDeletedError: an operator who asked for records
// that cannot be had is told, as ReplayKey refuses them when they are
// gone already, rather than given a replay from somewhere else. An
// unpark goes on from the log's start, nothing being able to handle
// those records any more, and the log says which they were.
func (r *Reader) skipDeleted() error {
	low, _, err := r.src.QueryWatermarkOffsets(r.topic, r.partition, 10_000)
	if err != nil {
		return fmt.Errorf("consumer: the log start of %s/%d: %w", r.topic, r.partition, err)
	}
	if low <= r.pos {
		return fmt.Errorf("consumer: %s/%d has no offset %d (log start %d), and Kafka says it is out of range", r.topic, r.partition, r.pos, low)
	}
	if r.stop >= 0 {
		return &RecordsDeletedError{Topic: r.topic, Partition: r.partition, From: r.pos, UpTo: low}
	}
	r.log.Error("records to read were deleted before they were read (retention or a deletion): they cannot be handled; reading on from the log start",
		"topic", r.topic, "partition", r.partition, "deleted_from", r.pos, "log_start", low)
	r.pos = low
	topic := r.topic
	if err := r.src.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: r.partition, Offset: kafka.Offset(low)}}); err != nil {
		return fmt.Errorf("consumer: read %s/%d: %w", r.topic, r.partition, err)
	}
	return nil
}
