package tracing

import (
	"slices"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
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
