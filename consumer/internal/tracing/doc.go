// Package tracing starts the OpenTelemetry spans of a member's handler
// calls: a span per Handler call, parented by the W3C trace context in the
// record's Kafka headers, and a span per BatchHandler call, linked to the
// trace context of each of its records. Its spans follow the messaging
// semantic conventions for a process span.
//
// The consumer package calls it through the small interface it defines
// (its spans.go) and only when Config.TracerProvider is set: without one
// no Spans exists, so no span is started and no header parsed.
//
//	s := tracing.New(tp, group)
//	ctx, span := s.StartRecord(ctx, m, attempt)
//	err := handler(ctx, m)
//	s.EndRecord(span, err)
//
// It imports OpenTelemetry's trace API and propagation, librdkafka's
// message type and internal/textsafe, and nothing of the consumer.
package tracing
