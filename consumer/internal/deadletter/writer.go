package deadletter

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/internal/textsafe"
)

// Producer writes copies: a *kafka.Producer.
type Producer interface {
	Produce(m *kafka.Message, deliveryChan chan kafka.Event) error
}

// Writer writes a member's dead letters to Topic with Producer.
type Writer struct {
	Producer Producer
	Topic    string
	// Backoff is the first wait after a failed write, doubled after each
	// up to MaxBackoff.
	Backoff, MaxBackoff time.Duration
	Log                 hclog.Logger
	// Reduced counts the dead letters sent smaller than the record, and
	// Failed the writes that failed and were tried again; nil: not
	// counted.
	Reduced, Failed *atomic.Int64
}

// Write writes m, which failed attempts times with cause, to the
// dead-letter topic and waits for the broker's ack. It returns nil once a
// copy is written and ctx's error if ctx ends first; it never gives up
// otherwise.
//
// A copy too large for the topic (the producer's message.max.bytes or the
// topic's max.message.bytes) is sent again smaller (Copies). Any other
// failure (brokers unreachable, the topic missing, no permission) is
// retried with the backoff; the first is logged as an error, the others
// at DEBUG.
func (w *Writer) Write(ctx context.Context, m *kafka.Message, cause error, attempts int) error {
	copies := Copies(w.Topic, m, cause, attempts)
	backoff := w.Backoff
	failed := false
	for i := 0; ; {
		err := ProduceAcked(ctx, w.Producer, copies[i])
		switch {
		case err == nil:
			if i > 0 {
				add(w.Reduced)
			}
			w.Log.Warn("record sent to the dead-letter topic", "topic", *m.TopicPartition.Topic, "partition", m.TopicPartition.Partition,
				"offset", m.TopicPartition.Offset, "dead_letter_topic", w.Topic, "dropped", HeaderValue(copies[i], HeaderDropped),
				"error", textsafe.Escape(cause.Error()))
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		}
		if tooLarge(err) && i+1 < len(copies) {
			i++
			w.Log.Warn("dead-letter copy too large for the dead-letter topic: sending it smaller", "topic", *m.TopicPartition.Topic,
				"partition", m.TopicPartition.Partition, "offset", m.TopicPartition.Offset, "bytes", len(m.Key)+len(m.Value),
				"dropped", HeaderValue(copies[i], HeaderDropped), "error", err)
			continue
		}
		add(w.Failed)
		log := w.Log.Debug
		if !failed {
			log, failed = w.Log.Error, true
		}
		what := "dead-letter write failed; retrying the write (the handler is not called again; the record holds its key and its partition's commit until it is written)"
		if tooLarge(err) {
			what = "the dead-letter topic refuses even a copy without key, value and headers as too large: raise its max.message.bytes (and the producer's message.max.bytes); retrying"
		}
		log(what, "topic", *m.TopicPartition.Topic, "partition", m.TopicPartition.Partition, "offset", m.TopicPartition.Offset,
			"dead_letter_topic", w.Topic, "error", textsafe.Escape(err.Error()))
		sleep(ctx, backoff)
		backoff = min(2*backoff, w.MaxBackoff)
		if backoff == 0 {
			backoff = time.Millisecond
		}
	}
}

// ProduceAcked writes m with pr and waits for its delivery report.
func ProduceAcked(ctx context.Context, pr Producer, m *kafka.Message) error {
	done := make(chan kafka.Event, 1)
	if err := pr.Produce(m, done); err != nil {
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

func add(n *atomic.Int64) {
	if n != nil {
		n.Add(1)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
