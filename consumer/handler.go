package consumer

import (
	"context"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Dead-letter headers.
const (
	HeaderTopic     = "keyshare.topic"
	HeaderPartition = "keyshare.partition"
	HeaderOffset    = "keyshare.offset"
	HeaderError     = "keyshare.error"
	HeaderAttempts  = "keyshare.attempts"
)

// process runs the handler on m with retries. It returns nil when the record
// is done (handled, or written to the dead-letter topic) and ctx's error if
// the member must stop working on it. mu guards j's retry fields.
func (c *Consumer) process(ctx context.Context, j *job, mu *sync.Mutex) error {
	m := j.m
	backoff := c.cfg.Retry.Backoff
	for attempt := 1; ; attempt++ {
		err := c.call(ctx, m)
		if err == nil {
			c.metrics.handled.Add(1)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.metrics.failed.Add(1)
		mu.Lock()
		j.attempts, j.lastErr = attempt, err.Error()
		mu.Unlock()
		if attempt >= c.cfg.Retry.MaxAttempts && c.dlq != nil {
			if derr := c.deadLetter(ctx, m, err, attempt); derr != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				c.log.Error("dead-letter write failed; retrying the record", "topic", *m.TopicPartition.Topic, "partition", m.TopicPartition.Partition, "offset", m.TopicPartition.Offset, "error", derr)
			} else {
				c.metrics.deadLettered.Add(1)
				return nil
			}
		}
		level := c.log.Warn
		if attempt < c.cfg.Retry.MaxAttempts {
			level = c.log.Debug
		}
		level("handler failed; retrying", "topic", *m.TopicPartition.Topic, "partition", m.TopicPartition.Partition,
			"offset", m.TopicPartition.Offset, "key", string(m.Key), "attempt", attempt, "error", err)
		c.metrics.retried.Add(1)
		sleep(ctx, backoff)
		backoff = min(2*backoff, c.cfg.Retry.MaxBackoff)
		if backoff == 0 {
			backoff = time.Millisecond
		}
	}
}

// call runs the handler, turning a panic into an error.
func (c *Consumer) call(ctx context.Context, m *kafka.Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return c.cfg.Handler(ctx, m)
}

// deadLetter writes m to the dead-letter topic and waits for the broker's ack.
func (c *Consumer) deadLetter(ctx context.Context, m *kafka.Message, cause error, attempts int) error {
	topic := c.cfg.DeadLetterTopic
	headers := append([]kafka.Header(nil), m.Headers...)
	headers = append(headers,
		kafka.Header{Key: HeaderTopic, Value: []byte(*m.TopicPartition.Topic)},
		kafka.Header{Key: HeaderPartition, Value: []byte(strconv.Itoa(int(m.TopicPartition.Partition)))},
		kafka.Header{Key: HeaderOffset, Value: []byte(strconv.FormatInt(int64(m.TopicPartition.Offset), 10))},
		kafka.Header{Key: HeaderError, Value: []byte(cause.Error())},
		kafka.Header{Key: HeaderAttempts, Value: []byte(strconv.Itoa(attempts))},
	)
	done := make(chan kafka.Event, 1)
	err := c.dlq.Produce(&kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
		Key:            m.Key, Value: m.Value, Headers: headers,
	}, done)
	if err != nil {
		return err
	}
	select {
	case ev := <-done:
		if dm, ok := ev.(*kafka.Message); ok && dm.TopicPartition.Error != nil {
			return dm.TopicPartition.Error
		}
		c.log.Warn("record sent to the dead-letter topic", "topic", *m.TopicPartition.Topic, "partition", m.TopicPartition.Partition, "offset", m.TopicPartition.Offset, "dead_letter_topic", topic, "error", cause)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
