package consumer

import (
	"context"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"go.opentelemetry.io/otel/trace"

	"github.com/keyshare/keyshare/consumer/internal/tracing"
)

// spans is what the pipeline asks of tracing (consumer/internal/tracing):
// a span around each handler call, started before the call with the ctx
// the handler gets and ended after it with the call's outcome. The
// consumer holds none (nil) unless Config.TracerProvider is set, so with
// tracing off a call costs one nil check: no span, no header parsed.
type spans interface {
	// StartRecord starts the span of attempt (1 the first) of m's Handler
	// call and returns the handler's ctx.
	StartRecord(ctx context.Context, m *kafka.Message, attempt int) (context.Context, trace.Span)
	// EndRecord ends it with the call's error (nil: done).
	EndRecord(span trace.Span, err error)
	// StartBatch starts the span of a BatchHandler call on msgs (attempt:
	// that of a record retried alone, 1 for a batch) and returns the
	// handler's ctx.
	StartBatch(ctx context.Context, msgs []*kafka.Message, attempt int) (context.Context, trace.Span)
	// EndBatch ends it with the records' results and the call's error.
	EndBatch(span trace.Span, res []error, err error)
}

// newSpans returns the spans of group's handler calls, or nil when tp is
// nil. A nil *tracing.Spans is not returned as a non-nil interface: the
// callers' nil check is what keeps tracing off.
func newSpans(tp trace.TracerProvider, group string) spans {
	if tp == nil {
		return nil
	}
	return tracing.New(tp, group)
}
