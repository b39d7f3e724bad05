package consumer

import (
	"context"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/internal/textsafe"
)

// Dead-letter headers. HeaderError holds the handler's error as text,
// Go-quoted if it has a non-printable character.
const (
	HeaderTopic     = "keyshare.topic"
	HeaderPartition = "keyshare.partition"
	HeaderOffset    = "keyshare.offset"
	HeaderError     = "keyshare.error"
	HeaderAttempts  = "keyshare.attempts"
)

// newDeadLetterProducer makes the dead-letter producer from the consumer's
// Kafka settings: every connection and security property (SASL, TLS,
// client.id, ...) the user gave, without the consumer-only ones, plus
// acks=all and idempotence. Its librdkafka logs go to log.
func newDeadLetterProducer(user kafka.ConfigMap, log hclog.Logger) (*kafka.Producer, chan struct{}, error) {
	pm := ProducerConfig(user)
	pm["acks"] = "all"
	pm["enable.idempotence"] = true
	pm["go.logs.channel.enable"] = true
	p, err := kafka.NewProducer(&pm)
	if err != nil {
		return nil, nil, fmt.Errorf("consumer: create dead-letter producer: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		forwardLogs(log, p.Logs())
	}()
	return p, done, nil
}

// ProducerConfig returns a copy of a consumer's librdkafka settings fit for
// a producer on the same cluster: the same connection and security
// properties, without librdkafka's consumer-only ones (which a producer
// would warn about) and without the go.* channel settings of the consumer.
func ProducerConfig(m kafka.ConfigMap) kafka.ConfigMap {
	out := kafka.ConfigMap{}
	for k, v := range m {
		if !ConsumerOnly(k) {
			out[k] = v
		}
	}
	return out
}

// ConsumerOnly reports whether k is a librdkafka consumer-scope property
// (or a confluent-kafka-go consumer setting).
func ConsumerOnly(k string) bool {
	for _, p := range []string{"fetch.", "group.", "auto.commit.", "offset.store.", "go."} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	switch k {
	case "enable.auto.commit", "enable.auto.offset.store", "auto.offset.reset", "session.timeout.ms", "heartbeat.interval.ms",
		"max.poll.interval.ms", "isolation.level", "partition.assignment.strategy", "check.crcs", "queued.min.messages",
		"queued.max.messages.kbytes", "enable.partition.eof", "consume.callback.max.messages", "coordinator.query.interval.ms",
		"rebalance_cb", "offset_commit_cb", "consume_cb":
		return true
	}
	return false
}

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
		// Escaped: it reaches stuck/ values, status and logs.
		j.attempts, j.lastErr = attempt, textsafe.Escape(err.Error())
		mu.Unlock()
		if attempt >= c.cfg.Retry.MaxAttempts && c.dlq != nil {
			if derr := c.deadLetter(ctx, m, err, attempt); derr != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				c.log.Error("dead-letter write failed; retrying the record", "topic", *m.TopicPartition.Topic, "partition", m.TopicPartition.Partition, "offset", m.TopicPartition.Offset, "error", textsafe.Escape(derr.Error()))
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
			"offset", m.TopicPartition.Offset, "key", textsafe.Bytes(m.Key), "attempt", attempt, "error", textsafe.Escape(err.Error()))
		c.metrics.retried.Add(1)
		sleep(ctx, backoff)
		if ctx.Err() != nil {
			// Cancelled while waiting (its range drained or dropped): no
			// new attempt, the next owner may be running the key.
			return ctx.Err()
		}
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
		kafka.Header{Key: HeaderError, Value: []byte(textsafe.Escape(cause.Error()))},
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
		c.log.Warn("record sent to the dead-letter topic", "topic", *m.TopicPartition.Topic, "partition", m.TopicPartition.Partition, "offset", m.TopicPartition.Offset, "dead_letter_topic", topic, "error", textsafe.Escape(cause.Error()))
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
