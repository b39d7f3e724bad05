package consumer

import (
	"context"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer/internal/deadletter"
)

// deadLetterWriter is what the handlers ask of dead letters
// (consumer/internal/deadletter): write m, which failed attempts times
// with cause (or an operator skipped), to the dead-letter topic and wait
// for the broker's ack. It returns nil once a copy is written and ctx's
// error if ctx ends first; it never gives up otherwise, and never calls
// the handler. The consumer holds one only with Config.DeadLetterTopic
// set (the dlq producer then exists too).
type deadLetterWriter interface {
	Write(ctx context.Context, m *kafka.Message, cause error, attempts int) error
}

// newDeadLetterWriter writes the consumer's dead letters with pr, with
// the record's backoff between failed writes, counted in the metrics.
func (c *Consumer) newDeadLetterWriter(pr *kafka.Producer) deadLetterWriter {
	return &deadletter.Writer{
		Producer: pr, Topic: c.cfg.DeadLetterTopic, Backoff: c.cfg.Retry.Backoff, MaxBackoff: c.cfg.Retry.MaxBackoff, Log: c.log,
		Reduced: &c.metrics.deadLetterReduced, Failed: &c.metrics.deadLetterErrors,
	}
}
