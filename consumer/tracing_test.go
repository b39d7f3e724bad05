package consumer_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

// The trace context the producer of the traced records put in their
// headers.
var (
	producerTrace = trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	producerSpan  = trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
)

const (
	traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tracestate  = "vendor=x"
)

// TestTracing runs three records through librdkafka and kfake: offset 0
// (key a) and 2 (key c, whose first attempt fails) carry a W3C trace
// context in their headers, offset 1 (key b) none.
func TestTracing(t *testing.T) {
	testutil.ParallelOnKfake(t)
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	traced := []kafka.Header{{Key: "traceparent", Value: []byte(traceparent)}, {Key: "tracestate", Value: []byte(tracestate)}}
	produceWithHeaders(t, k.Brokers, "orders", []kafka.Message{
		{Key: []byte("a"), Headers: traced},
		{Key: []byte("b")},
		{Key: []byte("c"), Headers: traced},
	})
	cluster := func(group string, tp trace.TracerProvider) *cluster {
		return &cluster{t: t, endpoints: e.Endpoints, brokers: k.Brokers, group: group, topics: []string{"orders"},
			mutate: func(c *consumer.Config) { c.TracerProvider, c.Retry.Backoff = tp, time.Millisecond }}
	}

	// handled records the span context of each handler call's ctx, by
	// offset, in call order.
	type handled struct {
		mu    sync.Mutex
		calls map[int64][]trace.SpanContext
	}
	record := func(h *handled, ctx context.Context, m *kafka.Message) int {
		h.mu.Lock()
		defer h.mu.Unlock()
		off := int64(m.TopicPartition.Offset)
		h.calls[off] = append(h.calls[off], trace.SpanContextFromContext(ctx))
		return len(h.calls[off])
	}

	t.Run("handler", func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		h := &handled{calls: map[int64][]trace.SpanContext{}}
		m := cluster("g-handler", tp).start("m1", func(ctx context.Context, m *kafka.Message) error {
			if record(h, ctx, m) == 1 && string(m.Key) == "c" {
				return errors.New("first attempt fails")
			}
			return nil
		})
		waitFor(t, "four handler calls traced", 30*time.Second, func() bool { return len(exp.GetSpans()) == 4 })
		m.stop(t)

		spans := exp.GetSpans()
		byCall := map[trace.SpanID]tracetest.SpanStub{}
		for _, s := range spans {
			byCall[s.SpanContext.SpanID()] = s
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, tc := range []struct {
			offset  int64
			attempt int
			key     string
			parent  bool
			failed  bool
		}{
			{0, 1, "a", true, false},
			{1, 1, "b", false, false},
			{2, 1, "c", true, true},
			{2, 2, "c", true, false},
		} {
			if len(h.calls[tc.offset]) < tc.attempt {
				t.Fatalf("offset %d: %d calls, want attempt %d", tc.offset, len(h.calls[tc.offset]), tc.attempt)
			}
			// The handler's ctx holds the span of its call.
			sc := h.calls[tc.offset][tc.attempt-1]
			s, ok := byCall[sc.SpanID()]
			if !sc.IsValid() || !ok {
				t.Fatalf("offset %d attempt %d: the handler's ctx has span context %v, not one of the exported spans", tc.offset, tc.attempt, sc)
			}
			if s.Name != "process orders" || s.SpanKind != trace.SpanKindConsumer {
				t.Errorf("offset %d: span %q kind %v, want \"process orders\" kind consumer", tc.offset, s.Name, s.SpanKind)
			}
			if tc.parent {
				if s.Parent.SpanID() != producerSpan || !s.Parent.IsRemote() || s.SpanContext.TraceID() != producerTrace || s.SpanContext.TraceState().String() != tracestate {
					t.Errorf("offset %d: parent %v trace %v state %q, want remote parent %v in trace %v with state %q",
						tc.offset, s.Parent.SpanID(), s.SpanContext.TraceID(), s.SpanContext.TraceState(), producerSpan, producerTrace, tracestate)
				}
			} else if s.Parent.IsValid() || s.SpanContext.TraceID() == producerTrace {
				t.Errorf("offset %d: parent %v trace %v, want a root span in a new trace", tc.offset, s.Parent, s.SpanContext.TraceID())
			}
			want := map[attribute.Key]attribute.Value{
				"messaging.system":                   attribute.StringValue("kafka"),
				"messaging.operation.type":           attribute.StringValue("process"),
				"messaging.consumer.group.name":      attribute.StringValue("g-handler"),
				"messaging.destination.name":         attribute.StringValue("orders"),
				"messaging.destination.partition.id": attribute.StringValue("0"),
				"messaging.kafka.offset":             attribute.IntValue(int(tc.offset)),
				"messaging.kafka.message.key":        attribute.StringValue(tc.key),
				"keyshare.attempt":                   attribute.IntValue(tc.attempt),
			}
			got := map[attribute.Key]attribute.Value{}
			for _, kv := range s.Attributes {
				got[kv.Key] = kv.Value
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("offset %d attempt %d: %s = %v, want %v", tc.offset, tc.attempt, k, got[k].AsInterface(), v.AsInterface())
				}
			}
			if wantCode := map[bool]codes.Code{true: codes.Error, false: codes.Unset}[tc.failed]; s.Status.Code != wantCode {
				t.Errorf("offset %d attempt %d: status %v, want %v", tc.offset, tc.attempt, s.Status, wantCode)
			}
		}
	})

	t.Run("off", func(t *testing.T) {
		h := &handled{calls: map[int64][]trace.SpanContext{}}
		m := cluster("g-off", nil).start("m1", func(ctx context.Context, m *kafka.Message) error {
			record(h, ctx, m)
			return nil
		})
		waitFor(t, "three records handled", 30*time.Second, func() bool { h.mu.Lock(); defer h.mu.Unlock(); return len(h.calls) == 3 })
		m.stop(t)
		h.mu.Lock()
		defer h.mu.Unlock()
		for off, calls := range h.calls {
			if calls[0].IsValid() {
				t.Errorf("offset %d: the handler's ctx has span context %v without a TracerProvider", off, calls[0])
			}
		}
	})

	t.Run("batch", func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		var mu sync.Mutex
		n := 0
		cl := cluster("g-batch", tp)
		prev := cl.mutate
		cl.mutate = func(c *consumer.Config) { prev(c); batchConfig(10, 100*time.Millisecond)(c) }
		m := cl.startBatch("m1", func(ctx context.Context, batch []*kafka.Message) []error {
			mu.Lock()
			defer mu.Unlock()
			if !trace.SpanContextFromContext(ctx).IsValid() {
				t.Errorf("the batch handler's ctx has no span")
			}
			n += len(batch)
			return nil
		})
		waitFor(t, "three records handled", 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return n == 3 })
		m.stop(t)

		// However the records were batched: each batch span is a root,
		// and the links are the traced records' contexts.
		records, linked := 0, map[int64]bool{}
		for _, s := range exp.GetSpans() {
			if s.Parent.IsValid() {
				t.Errorf("batch span %q has parent %v, want a root", s.Name, s.Parent)
			}
			for _, kv := range s.Attributes {
				if kv.Key == "messaging.batch.message_count" {
					records += int(kv.Value.AsInt64())
				}
			}
			for _, l := range s.Links {
				if l.SpanContext.SpanID() != producerSpan || l.SpanContext.TraceID() != producerTrace {
					t.Errorf("link to %v, want the producer's span %v", l.SpanContext, producerSpan)
				}
				for _, kv := range l.Attributes {
					if kv.Key == "messaging.kafka.offset" {
						linked[kv.Value.AsInt64()] = true
					}
				}
			}
		}
		if records != 3 || len(linked) != 2 || !linked[0] || !linked[2] {
			t.Errorf("batch spans count %d records and link offsets %v, want 3 records and links to offsets 0 and 2", records, linked)
		}
	})
}

// produceWithHeaders writes msgs, in order, to partition 0 of topic.
func produceWithHeaders(t *testing.T, brokers, topic string, msgs []kafka.Message) {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": brokers, "enable.idempotence": true, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	done := make(chan kafka.Event, len(msgs))
	for i := range msgs {
		m := msgs[i]
		m.TopicPartition = kafka.TopicPartition{Topic: &topic, Partition: 0}
		if err := p.Produce(&m, done); err != nil {
			t.Fatal(err)
		}
	}
	for range msgs {
		select {
		case ev := <-done:
			if err := ev.(*kafka.Message).TopicPartition.Error; err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no delivery report after 30s")
		}
	}
}
