package consumer

import (
	"context"
	"errors"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

const testParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestSpansOff: with no TracerProvider the consumer holds no spans at all
// (a nil interface, not a nil pointer in one), so call and callBatch skip
// tracing on their nil check.
func TestSpansOff(t *testing.T) {
	if s := newSpans(nil, "g"); s != nil {
		t.Fatalf("newSpans(nil) = %#v, want nil", s)
	}
}

// TestSpansWiring: call and callBatch hand the handler the span's ctx and
// end the span with the call's outcome, a panic's included.
func TestSpansWiring(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	topic := "orders"
	m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 1, Offset: 7},
		Headers: []kafka.Header{{Key: "traceparent", Value: []byte(testParent)}}}
	var inCall trace.SpanContext
	cfg := DefaultConfig()
	cfg.Handler = func(ctx context.Context, m *kafka.Message) error {
		inCall = trace.SpanContextFromContext(ctx)
		if m.TopicPartition.Offset == 8 {
			panic("boom")
		}
		return errors.New("failed")
	}
	cfg.BatchHandler = func(ctx context.Context, batch []*kafka.Message) []error {
		inCall = trace.SpanContextFromContext(ctx)
		return nil
	}
	c := &Consumer{cfg: cfg, spans: newSpans(tp, "g")}

	if err := c.call(context.Background(), m, 1); err == nil {
		t.Fatal("call returned no error")
	}
	panicking := *m
	panicking.TopicPartition.Offset = 8
	if err := c.call(context.Background(), &panicking, 2); err == nil {
		t.Fatal("a panicking call returned no error")
	}
	if _, err := c.callBatch(context.Background(), []*kafka.Message{m}, 1); err != nil {
		t.Fatal(err)
	}

	ended := rec.Ended()
	if len(ended) != 3 {
		t.Fatalf("%d spans ended, want 3 (two calls, one batch)", len(ended))
	}
	for i, want := range []codes.Code{codes.Error, codes.Error, codes.Unset} {
		if got := ended[i].Status().Code; got != want {
			t.Errorf("span %d (%s) has status %v, want %v", i, ended[i].Name(), got, want)
		}
	}
	if parent := ended[0].Parent(); parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("a record's span has parent %v, want the record's traceparent", parent.SpanID())
	}
	if inCall.SpanID() != ended[2].SpanContext().SpanID() {
		t.Errorf("the batch handler's ctx carries span %v, not its call's %v", inCall.SpanID(), ended[2].SpanContext().SpanID())
	}
}

// BenchmarkHandlerCall measures what tracing adds to a handler call
// (call: the per-record path's handler invocation, with a no-op handler):
// off (no TracerProvider), and on with the SDK (every span sampled and
// handed to an exporter that drops it) for a record without and with a
// traceparent header. Run with:
//
//	go test -run '^$' -bench BenchmarkHandlerCall -benchmem ./consumer/
func BenchmarkHandlerCall(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
	topic := "orders"
	plain := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 3, Offset: 12345}, Key: []byte("key-17")}
	traced := *plain
	traced.Headers = []kafka.Header{{Key: "traceparent", Value: []byte(testParent)}}
	for _, tc := range []struct {
		name  string
		spans spans
		m     *kafka.Message
	}{
		{"off", nil, &traced},
		{"on-no-header", newSpans(tp, "g"), plain},
		{"on-traceparent", newSpans(tp, "g"), &traced},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Handler = func(context.Context, *kafka.Message) error { return nil }
			c := &Consumer{cfg: cfg, spans: tc.spans}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := c.call(ctx, tc.m, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
