package deliver

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	grpccodes "google.golang.org/grpc/codes"
)

// tracerName is the instrumentation scope of the delivery spans.
const tracerName = "github.com/keyshare/keyshare/deliver"

// recordsKey is how many records a request carries.
const recordsKey = attribute.Key("keyshare.deliver.records")

// tracing starts a span of kind Client around each request and puts its
// W3C trace context in the request's headers (HTTP) or metadata (gRPC).
type tracing struct {
	tracer trace.Tracer
	prop   propagation.TraceContext
}

// newTracing returns nil when tp is nil: tracing is off.
func newTracing(tp trace.TracerProvider) *tracing {
	if tp == nil {
		return nil
	}
	return &tracing{tracer: tp.Tracer(tracerName)}
}

// start starts a request's span, a child of ctx's (the handler call's
// span when the consumer traces), and returns the function that ends it
// with the answer's status (0: none) and the request's error.
func (t *tracing) start(ctx context.Context, url string, n int) (context.Context, func(status int, err error)) {
	ctx, span := t.tracer.Start(ctx, http.MethodPost, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.HTTPRequestMethodPost, semconv.URLFull(url), recordsKey.Int(n)))
	return ctx, func(status int, err error) {
		if status != 0 {
			span.SetAttributes(semconv.HTTPResponseStatusCode(status))
		}
		switch {
		case err != nil:
			span.SetStatus(codes.Error, err.Error())
		case status < 200 || status > 299:
			span.SetStatus(codes.Error, http.StatusText(status))
		}
		span.End()
	}
}

// startRPC starts a gRPC call's span, as start does a POST's, and returns
// the function that ends it with the call's status code and error.
func (t *tracing) startRPC(ctx context.Context, host string, port, n int) (context.Context, func(code grpccodes.Code, err error)) {
	ctx, span := t.tracer.Start(ctx, deliverMethod, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.RPCSystemNameGRPC, semconv.RPCMethod(deliverMethod),
			semconv.ServerAddress(host), semconv.ServerPort(port), recordsKey.Int(n)))
	return ctx, func(code grpccodes.Code, err error) {
		span.SetAttributes(semconv.RPCResponseStatusCode(codeName(code)))
		switch {
		case err != nil:
			span.SetStatus(codes.Error, err.Error())
		case code != grpccodes.OK:
			span.SetStatus(codes.Error, code.String())
		}
		span.End()
	}
}

// inject writes ctx's trace context (traceparent, tracestate) into a
// request's headers or metadata.
func (t *tracing) inject(ctx context.Context, carrier propagation.TextMapCarrier) {
	t.prop.Inject(ctx, carrier)
}
