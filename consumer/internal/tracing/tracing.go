package tracing

import (
	"context"
	"fmt"
	"strconv"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/keyshare/keyshare/internal/textsafe"
)

// Each handler call gets a span of kind Consumer named as the messaging
// semantic conventions name a process span ("process orders"). Its parent
// is the W3C trace context (traceparent, tracestate) in the record's
// Kafka headers, so the trace of whatever produced the record continues
// through its handling; a record without one starts a new trace. The
// span's context is the handler's ctx. A BatchHandler call gets one root
// span linked to the trace context of each of its records that carries
// one: a batch has many parents, and the conventions model that with
// links.

// tracerName is the instrumentation scope of keyshare's spans: the public
// package whose Config turns them on, not this one, which users never see.
const tracerName = "github.com/keyshare/keyshare/consumer"

// attemptKey is the handler call's attempt at its record (1 the first):
// the messaging conventions have no attribute for it.
const attemptKey = attribute.Key("keyshare.attempt")

// Spans starts and ends the spans of one consumer group's handler calls.
type Spans struct {
	tracer trace.Tracer
	group  string
}

// New returns the spans of group's handler calls, started with tp's
// tracer; nil when tp is nil: tracing is off.
func New(tp trace.TracerProvider, group string) *Spans {
	if tp == nil {
		return nil
	}
	return &Spans{tracer: tp.Tracer(tracerName), group: group}
}

// headerCarrier reads and writes W3C trace context in a record's headers
// (propagation.TextMapCarrier). Kafka header names are case-sensitive and
// the W3C names lower case; the first header of a name counts.
type headerCarrier struct{ h *[]kafka.Header }

func (c headerCarrier) Get(key string) string {
	for _, h := range *c.h {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (c headerCarrier) Set(key, value string) {
	for i, h := range *c.h {
		if h.Key == key {
			(*c.h)[i].Value = []byte(value)
			return
		}
	}
	*c.h = append(*c.h, kafka.Header{Key: key, Value: []byte(value)})
}

func (c headerCarrier) Keys() []string {
	out := make([]string, len(*c.h))
	for i, h := range *c.h {
		out[i] = h.Key
	}
	return out
}

// recordContext is the trace context in m's headers; it is not valid when
// m carries none (or a malformed one).
func recordContext(m *kafka.Message) trace.SpanContext {
	ctx := propagation.TraceContext{}.Extract(context.Background(), headerCarrier{&m.Headers})
	return trace.SpanContextFromContext(ctx)
}

// StartRecord starts the span of attempt of m's handler call, a child of
// the trace context in m's headers, and returns the handler's ctx.
func (t *Spans) StartRecord(ctx context.Context, m *kafka.Message, attempt int) (context.Context, trace.Span) {
	topic := ""
	if m.TopicPartition.Topic != nil {
		topic = *m.TopicPartition.Topic
	}
	attrs := make([]attribute.KeyValue, 0, 9) // the key's too: no regrowth
	attrs = append(attrs,
		semconv.MessagingSystemKafka,
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
		semconv.MessagingConsumerGroupName(t.group),
		semconv.MessagingDestinationName(topic),
		semconv.MessagingDestinationPartitionID(strconv.Itoa(int(m.TopicPartition.Partition))),
		semconv.MessagingKafkaOffset(int(m.TopicPartition.Offset)),
		attemptKey.Int(attempt),
	)
	if m.Key != nil {
		// Escaped and cut as in logs: a key may be binary or megabytes.
		attrs = append(attrs, semconv.MessagingKafkaMessageKey(textsafe.Bytes(m.Key)))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}
	if sc := recordContext(m); sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	} else {
		// Not a child of a span the caller of Run may have put in ctx.
		opts = append(opts, trace.WithNewRoot())
	}
	return t.tracer.Start(ctx, "process "+topic, opts...)
}

// StartBatch starts the span of attempt of a BatchHandler call on msgs
// (the attempt of a record retried alone; 1 for a batch), linked to each
// record's trace context, and returns the handler's ctx.
func (t *Spans) StartBatch(ctx context.Context, msgs []*kafka.Message, attempt int) (context.Context, trace.Span) {
	var links []trace.Link
	for _, m := range msgs {
		if sc := recordContext(m); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{
				semconv.MessagingDestinationPartitionID(strconv.Itoa(int(m.TopicPartition.Partition))),
				semconv.MessagingKafkaOffset(int(m.TopicPartition.Offset)),
			}})
		}
	}
	// The conventions name a span over several destinations by its
	// operation alone.
	name, topic := "process", ""
	if len(msgs) > 0 && msgs[0].TopicPartition.Topic != nil {
		topic = *msgs[0].TopicPartition.Topic
		name += " " + topic
		for _, m := range msgs[1:] {
			if m.TopicPartition.Topic == nil || *m.TopicPartition.Topic != topic {
				name, topic = "process", ""
				break
			}
		}
	}
	attrs := []attribute.KeyValue{
		semconv.MessagingSystemKafka,
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
		semconv.MessagingConsumerGroupName(t.group),
		semconv.MessagingBatchMessageCount(len(msgs)),
		attemptKey.Int(attempt),
	}
	if topic != "" {
		attrs = append(attrs, semconv.MessagingDestinationName(topic))
	}
	return t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithNewRoot(),
		trace.WithLinks(links...), trace.WithAttributes(attrs...))
}

// EndRecord ends a handler call's span with an error status if err is
// not nil.
func (t *Spans) EndRecord(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, textsafe.Escape(err.Error()))
	}
	span.End()
}

// EndBatch ends a batch's span with an error status if the call failed
// (err) or any record did (res).
func (t *Spans) EndBatch(span trace.Span, res []error, err error) {
	if err == nil {
		failed := 0
		for _, e := range res {
			if e != nil {
				failed++
			}
		}
		if failed > 0 {
			err = fmt.Errorf("%d of %d records failed", failed, len(res))
		}
	}
	t.EndRecord(span, err)
}
