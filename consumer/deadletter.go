package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/internal/textsafe"
)

// Dead-letter headers, written by keyshare on every dead letter. HeaderError
// holds the handler's error as text, Go-quoted if it has a non-printable
// character and cut to a few kilobytes. HeaderDropped is there only when the
// copy was too large for the dead-letter topic and went without its value
// ("value") or without its key, value and own headers ("key,value,headers");
// the original stays at HeaderTopic, HeaderPartition, HeaderOffset while
// the topic retains it.
const (
	HeaderTopic     = "keyshare.topic"
	HeaderPartition = "keyshare.partition"
	HeaderOffset    = "keyshare.offset"
	HeaderError     = "keyshare.error"
	HeaderAttempts  = "keyshare.attempts"
	HeaderDropped   = "keyshare.dropped"
	// HeaderFence is on a parked copy only: the fencing token of the
	// range the member parked the record under (Fence.Token), by which an
	// unpark passes over a copy that a member which had lost the range
	// wrote late, behind the next owner's (park.go).
	HeaderFence = "keyshare.fence"
)

// headerPrefix is the prefix of keyshare's header names. A record's own
// header whose name starts with it (in any case) is renamed on its dead
// letter with RenamedHeaderPrefix in front ("keyshare.offset" becomes
// "original.keyshare.offset"), so every header of a dead letter named
// keyshare.* was written by keyshare: a reader that takes the first header
// of a name cannot be handed a producer's forged offset or error.
const (
	headerPrefix        = "keyshare."
	RenamedHeaderPrefix = "original."
)

// newDeadLetterProducer makes the dead-letter producer from the consumer's
// Kafka settings: every connection and security property (SASL, TLS,
// client.id, ...) the user gave, without the consumer-only ones, plus
// acks=all, idempotence, and one record per batch. Its librdkafka logs go
// to log.
func newDeadLetterProducer(user kafka.ConfigMap, log hclog.Logger) (*kafka.Producer, chan struct{}, error) {
	pm := ProducerConfig(user)
	pm["acks"] = "all"
	pm["enable.idempotence"] = true
	// A broker checks a batch against the topic's max.message.bytes as a
	// whole: a small copy batched with a large dead letter of another key
	// would be refused with it, and sent without its value for nothing.
	// Dead letters are few; each waits for its ack anyway.
	pm["batch.num.messages"] = 1
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

// deadLetter writes m, which failed attempts times with cause, to the
// dead-letter topic and waits for the broker's ack. It returns nil once a
// copy is written and ctx's error if ctx ends first; it never gives up
// otherwise, and never calls the handler.
//
// A copy too large for the topic (the producer's message.max.bytes or the
// topic's max.message.bytes) is sent again smaller: without its value, then
// with keyshare's headers alone (HeaderDropped says which). Any other
// failure (brokers unreachable, the topic missing, no permission) is
// retried with the record's backoff; the first is logged as an error, and
// the record holds its key and its partition's commit meanwhile, as it
// would without a dead-letter topic.
func (c *Consumer) deadLetter(ctx context.Context, m *kafka.Message, cause error, attempts int) error {
	copies := deadLetterCopies(c.cfg.DeadLetterTopic, m, cause, attempts)
	backoff := c.cfg.Retry.Backoff
	failed := false
	for i := 0; ; {
		err := c.produceDeadLetter(ctx, copies[i])
		switch {
		case err == nil:
			if i > 0 {
				c.metrics.deadLetterReduced.Add(1)
			}
			c.log.Warn("record sent to the dead-letter topic", "topic", *m.TopicPartition.Topic, "partition", m.TopicPartition.Partition,
				"offset", m.TopicPartition.Offset, "dead_letter_topic", c.cfg.DeadLetterTopic, "dropped", headerValue(copies[i], HeaderDropped),
				"error", textsafe.Escape(cause.Error()))
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		}
		if tooLarge(err) && i+1 < len(copies) {
			i++
			c.log.Warn("dead-letter copy too large for the dead-letter topic: sending it smaller", "topic", *m.TopicPartition.Topic,
				"partition", m.TopicPartition.Partition, "offset", m.TopicPartition.Offset, "bytes", len(m.Key)+len(m.Value),
				"dropped", headerValue(copies[i], HeaderDropped), "error", err)
			continue
		}
		c.metrics.deadLetterErrors.Add(1)
		log := c.log.Debug
		if !failed {
			log, failed = c.log.Error, true
		}
		what := "dead-letter write failed; retrying the write (the handler is not called again; the record holds its key and its partition's commit until it is written)"
		if tooLarge(err) {
			what = "the dead-letter topic refuses even a copy without key, value and headers as too large: raise its max.message.bytes (and the producer's message.max.bytes); retrying"
		}
		log(what, "topic", *m.TopicPartition.Topic, "partition", m.TopicPartition.Partition, "offset", m.TopicPartition.Offset,
			"dead_letter_topic", c.cfg.DeadLetterTopic, "error", textsafe.Escape(err.Error()))
		sleep(ctx, backoff)
		backoff = min(2*backoff, c.cfg.Retry.MaxBackoff)
		if backoff == 0 {
			backoff = time.Millisecond
		}
	}
}

// produceDeadLetter writes one copy and waits for its delivery report.
func (c *Consumer) produceDeadLetter(ctx context.Context, dm *kafka.Message) error {
	done := make(chan kafka.Event, 1)
	if err := c.dlq.Produce(dm, done); err != nil {
		return err
	}
	select {
	case ev := <-done:
		if r, ok := ev.(*kafka.Message); ok && r.TopicPartition.Error != nil {
			return r.TopicPartition.Error
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// deadLetterCopies returns the dead letters of m for topic, to try in
// turn: the whole record, then without its value, then keyshare's headers
// alone. Each carries keyshare's headers; the record's own headers have
// keyshare's names renamed (RenamedHeaderPrefix).
func deadLetterCopies(topic string, m *kafka.Message, cause error, attempts int) []*kafka.Message {
	ours := []kafka.Header{
		{Key: HeaderTopic, Value: []byte(*m.TopicPartition.Topic)},
		{Key: HeaderPartition, Value: []byte(strconv.Itoa(int(m.TopicPartition.Partition)))},
		{Key: HeaderOffset, Value: []byte(strconv.FormatInt(int64(m.TopicPartition.Offset), 10))},
		{Key: HeaderError, Value: []byte(textsafe.Escape(cause.Error()))},
		{Key: HeaderAttempts, Value: []byte(strconv.Itoa(attempts))},
	}
	theirs := renameOurs(m.Headers)
	to := kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}
	dropped := func(what string) kafka.Header { return kafka.Header{Key: HeaderDropped, Value: []byte(what)} }
	return []*kafka.Message{
		{TopicPartition: to, Key: m.Key, Value: m.Value, Headers: append(slices.Clone(theirs), ours...)},
		{TopicPartition: to, Key: m.Key, Headers: append(append(slices.Clone(theirs), ours...), dropped("value"))},
		{TopicPartition: to, Headers: append(slices.Clone(ours), dropped("key,value,headers"))},
	}
}

// renameOurs is a copy of a record's own headers with the names that
// start with keyshare's prefix renamed (RenamedHeaderPrefix), so that
// every keyshare.* header of a copy keyshare writes is keyshare's.
func renameOurs(hs []kafka.Header) []kafka.Header {
	var out []kafka.Header
	for _, h := range hs {
		if len(h.Key) >= len(headerPrefix) && strings.EqualFold(h.Key[:len(headerPrefix)], headerPrefix) {
			h.Key = RenamedHeaderPrefix + h.Key
		}
		out = append(out, h)
	}
	return out
}

// headerValue is the value of m's first header named name ("" if none).
func headerValue(m *kafka.Message, name string) string {
	for _, h := range m.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
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
