package consumer

import (
	"context"
	"slices"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

const (
	testParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	otherSpan  = "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01"
)

// TestRecordContext: which headers make a record's trace context.
func TestRecordContext(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers []kafka.Header
		span    string // the parent span id; "" for none
		state   string
	}{
		{"none", nil, "", ""},
		{"traceparent", []kafka.Header{{Key: "traceparent", Value: []byte(testParent)}}, "00f067aa0ba902b7", ""},
		{"with tracestate", []kafka.Header{{Key: "other", Value: []byte("x")}, {Key: "traceparent", Value: []byte(testParent)}, {Key: "tracestate", Value: []byte("a=1,b=2")}}, "00f067aa0ba902b7", "a=1,b=2"},
		{"first of two counts", []kafka.Header{{Key: "traceparent", Value: []byte(testParent)}, {Key: "traceparent", Value: []byte(otherSpan)}}, "00f067aa0ba902b7", ""},
		{"names are case-sensitive", []kafka.Header{{Key: "Traceparent", Value: []byte(testParent)}}, "", ""},
		{"malformed", []kafka.Header{{Key: "traceparent", Value: []byte("00-not-a-trace-01")}}, "", ""},
		{"zero trace id", []kafka.Header{{Key: "traceparent", Value: []byte("00-00000000000000000000000000000000-00f067aa0ba902b7-01")}}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := recordContext(&kafka.Message{Headers: tc.headers})
			span := ""
			if sc.IsValid() {
				span = sc.SpanID().String()
				if !sc.IsRemote() {
					t.Errorf("the record's context is not remote")
				}
			}
			if span != tc.span || sc.TraceState().String() != tc.state {
				t.Errorf("span %q state %q, want %q %q", span, sc.TraceState(), tc.span, tc.state)
			}
		})
	}
}

// TestHeaderCarrierSet: Set replaces a header of the name or appends one.
func TestHeaderCarrierSet(t *testing.T) {
	h := []kafka.Header{{Key: "a", Value: []byte("1")}, {Key: "traceparent", Value: []byte("old")}}
	c := headerCarrier{&h}
	c.Set("traceparent", "new")
	c.Set("tracestate", "s=1")
	if got, want := c.Keys(), []string{"a", "traceparent", "tracestate"}; !slices.Equal(got, want) {
		t.Fatalf("keys %v, want %v", got, want)
	}
	if c.Get("traceparent") != "new" || c.Get("tracestate") != "s=1" || c.Get("missing") != "" {
		t.Fatalf("headers %q", h)
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
		name    string
		tracing *tracing
		m       *kafka.Message
	}{
		{"off", nil, &traced},
		{"on-no-header", newTracing(tp, "g"), plain},
		{"on-traceparent", newTracing(tp, "g"), &traced},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Handler = func(context.Context, *kafka.Message) error { return nil }
			c := &Consumer{cfg: cfg, tracing: tc.tracing}
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
