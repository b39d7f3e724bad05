package consumer

import (
	"context"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"
)

// preludeReader reads one partition from an offset to stop, or with stop
// -1, to its end.
type preludeReader struct {
	kc        *kafka.Consumer
	log       hclog.Logger
	topic     string
	partition int32
	pos       int64 // the next offset to read
	end       int64 // the partition's end as last queried
	stop      int64
}

// newPreludeReader reads topic/partition from from to stop (-1: its end),
// logging to log what it cannot read.
func (c *Consumer) newPreludeReader(log hclog.Logger, topic string, partition int32, from, stop int64) (*preludeReader, error) {
	cm := kafka.ConfigMap{}
	for k, v := range c.cfg.Kafka {
		cm[k] = v
	}
	cm["group.id"] = c.cfg.Group // never joined nor committed: Assign only
	cm["enable.auto.commit"] = false
	cm["enable.auto.offset.store"] = false
	cm["enable.partition.eof"] = true
	// Records deleted before they were read are not skipped quietly:
	// with "error" librdkafka reports them and stops (skipDeleted).
	cm["auto.offset.reset"] = "error"
	delete(cm, "go.logs.channel.enable")
	kc, err := kafka.NewConsumer(&cm)
	if err != nil {
		return nil, fmt.Errorf("consumer: a reader of %s/%d: %w", topic, partition, err)
	}
	if err := kc.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: partition, Offset: kafka.Offset(from)}}); err != nil {
		_ = kc.Close()
		return nil, fmt.Errorf("consumer: read %s/%d: %w", topic, partition, err)
	}
	return &preludeReader{kc: kc, log: log, topic: topic, partition: partition, pos: from, end: -1, stop: stop}, nil
}

func (r *preludeReader) close() { _ = r.kc.Close() }

// next returns the next record, or nil at the partition's end (queried
// again each time it is reached: records parked meanwhile are read).
func (r *preludeReader) next(ctx context.Context) (*kafka.Message, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if r.stop >= 0 && r.pos >= r.stop {
			return nil, nil
		}
		if r.end < 0 || r.pos >= r.end {
			_, high, err := r.kc.QueryWatermarkOffsets(r.topic, r.partition, 10_000)
			if err != nil {
				return nil, fmt.Errorf("consumer: the end of %s/%d: %w", r.topic, r.partition, err)
			}
			r.end = high
			if r.pos >= r.end {
				return nil, nil
			}
		}
		switch e := r.kc.Poll(100).(type) {
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

// recordsDeletedError: records a replay was to read again were deleted
// (retention, or a DeleteRecords) before it read them.
type recordsDeletedError struct {
	topic      string
	partition  int32
	from, upTo int64 // [from, upTo): upTo is the log start
}

func (e *recordsDeletedError) Error() string {
	return fmt.Sprintf("records %d to %d of %s/%d were deleted (retention or a deletion) before the replay read them: "+
		"replay from %d or later (keyshare key cancel, then keyshare key replay --from %d)", e.from, e.upTo-1, e.topic, e.partition, e.upTo, e.upTo)
}

// skipDeleted handles the records from r.pos deleted (retention, or a
// DeleteRecords) before they were read. A replay (a reader with a stop)
// ends with a *recordsDeletedError: an operator who asked for records
// that cannot be had is told, as ReplayKey refuses them when they are
// gone already, rather than given a replay from somewhere else. An
// unpark goes on from the log's start, nothing being able to handle
// those records any more, and the log says which they were.
func (r *preludeReader) skipDeleted() error {
	low, _, err := r.kc.QueryWatermarkOffsets(r.topic, r.partition, 10_000)
	if err != nil {
		return fmt.Errorf("consumer: the log start of %s/%d: %w", r.topic, r.partition, err)
	}
	if low <= r.pos {
		return fmt.Errorf("consumer: %s/%d has no offset %d (log start %d), and Kafka says it is out of range", r.topic, r.partition, r.pos, low)
	}
	if r.stop >= 0 {
		return &recordsDeletedError{topic: r.topic, partition: r.partition, from: r.pos, upTo: low}
	}
	r.log.Error("records to read were deleted before they were read (retention or a deletion): they cannot be handled; reading on from the log start",
		"topic", r.topic, "partition", r.partition, "deleted_from", r.pos, "log_start", low)
	r.pos = low
	topic := r.topic
	if err := r.kc.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: r.partition, Offset: kafka.Offset(low)}}); err != nil {
		return fmt.Errorf("consumer: read %s/%d: %w", r.topic, r.partition, err)
	}
	return nil
}
