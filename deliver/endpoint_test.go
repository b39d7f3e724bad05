package deliver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func message(topic string, partition int32, offset int64, key string) *kafka.Message {
	return &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: partition, Offset: kafka.Offset(offset)},
		Key: []byte(key), Value: []byte("v")}
}

// newEndpoint starts an HTTP server running serve and an Endpoint for it
// with short waits.
func newEndpoint(t *testing.T, serve http.HandlerFunc, mutate ...func(*Config)) (*Endpoint, *httptest.Server) {
	t.Helper()
	srv := httptest.NewServer(serve)
	t.Cleanup(srv.Close)
	cfg := Config{URL: srv.URL + "/records", MemberID: "m-1", Timeout: 2 * time.Second,
		Backoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond, MaxRetryAfter: 20 * time.Millisecond}
	for _, m := range mutate {
		m(&cfg)
	}
	ep, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ep.Close)
	return ep, srv
}

// readRequest decodes a request the endpoint received.
func readRequest(t *testing.T, r *http.Request) request {
	t.Helper()
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		t.Errorf("request body: %v", err)
	}
	return req
}

// TestRefusedRecordFails: a 4xx fails the record with the endpoint's
// text escaped; the next call of the same record is attempt 2, and a
// record done is back to attempt 1 if it comes again.
func TestRefusedRecordFails(t *testing.T) {
	t.Parallel()
	var attempts []int
	var mu sync.Mutex
	refuse := true
	ep, _ := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		req := readRequest(t, r)
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, req.Records[0].Attempt)
		if r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Authorization") != "Bearer s3cret" {
			t.Errorf("request headers %v: want JSON and the configured Authorization", r.Header)
		}
		if refuse {
			w.WriteHeader(http.StatusUnprocessableEntity)
			io.WriteString(w, "amount \x1b[31mnegative")
		}
	}, func(c *Config) { c.Header = http.Header{"Authorization": {"Bearer s3cret"}} })
	h := ep.Handler()
	m := message("orders", 0, 5, "k")
	for range 2 {
		err := h(t.Context(), m)
		var refused *RefusedError
		if !errors.As(err, &refused) || refused.Status != 422 || refused.Body != `"amount \x1b[31mnegative"` {
			t.Fatalf("handler = %v, want a RefusedError 422 with the escaped body", err)
		}
	}
	mu.Lock()
	refuse = false
	mu.Unlock()
	if err := h(t.Context(), m); err != nil {
		t.Fatalf("handler after the endpoint took the record: %v", err)
	}
	if err := h(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []int{1, 2, 3, 1}; !equal(attempts, want) {
		t.Errorf("attempts the endpoint saw %v, want %v", attempts, want)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestTroubleWaitsForAnswer: 503s (one with a Retry-After far above the
// cap), a 429, a 404 and a request unanswered past its deadline and grace
// are the endpoint's trouble: the handler sends the record again until it
// is taken, and the Endpoint is not ready meanwhile.
func TestTroubleWaitsForAnswer(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	var ep *Endpoint
	var notReady atomic.Int32
	ep, _ = newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		readRequest(t, r)
		i := n.Add(1)
		if i > 1 && ep.Ready() != nil {
			notReady.Add(1)
		}
		switch i {
		case 1:
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusServiceUnavailable)
		case 2:
			w.WriteHeader(http.StatusTooManyRequests)
		case 3:
			w.WriteHeader(http.StatusNotFound)
		case 4:
			<-r.Context().Done() // the member closes it past the deadline and its grace
		case 5:
			w.WriteHeader(http.StatusBadGateway)
		}
	}, func(c *Config) { c.Timeout = 100 * time.Millisecond })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := ep.Handler()(ctx, message("orders", 0, 1, "k")); err != nil {
		t.Fatalf("handler = %v, want nil once the endpoint takes the record", err)
	}
	if got := n.Load(); got != 6 {
		t.Errorf("%d requests, want 6 (5 in trouble, then the one taken)", got)
	}
	if got := notReady.Load(); got != 5 {
		t.Errorf("Ready said not ready during %d of the 5 requests after the first trouble", got)
	}
	if err := ep.Ready(); err != nil {
		t.Errorf("Ready after the endpoint answered: %v", err)
	}
	if counts, waiting := requestCounts(t, ep); counts["trouble"] != 5 || counts["done"] != 1 || len(counts) != 2 || waiting != 0 {
		t.Errorf("requests by outcome %v, %g calls waiting; want 5 in trouble, 1 done, none waiting", counts, waiting)
	}
}

// TestEndpointDownUntilContextEnds: with nothing listening the handler
// keeps trying and returns the context's error when it ends, never a
// record failure.
func TestEndpointDownUntilContextEnds(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // connections to it are refused
	ep, err := New(Config{URL: "http://" + addr + "/?api_key=s3cret", Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ep.Handler()(ctx, message("orders", 0, 1, "k")) }()
	for ep.Ready() == nil {
		time.Sleep(time.Millisecond)
	}
	if msg := ep.Ready().Error(); !strings.Contains(msg, "delivery endpoint http://"+addr+"/?... not answering") ||
		!strings.Contains(msg, "connection refused") || strings.Contains(msg, "s3cret") {
		t.Errorf("Ready = %q: want the endpoint without its query, and why", msg)
	}
	cancel()
	err = <-done
	var refused *RefusedError
	if !errors.Is(err, context.Canceled) || errors.As(err, &refused) {
		t.Fatalf("handler = %v, want context.Canceled", err)
	}
	if err := ep.Ready(); err != nil {
		t.Errorf("Ready with no call waiting: %v", err)
	}
}

// TestCancelClosesRequest: a record whose range is revoked (its context
// ends) while the endpoint works on it: the request is cancelled and the
// endpoint sees its connection closed.
func TestCancelClosesRequest(t *testing.T) {
	t.Parallel()
	closed := make(chan struct{})
	ep, _ := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		readRequest(t, r)
		<-r.Context().Done() // the server cancels it when the client closes
		close(closed)
	}, func(c *Config) { c.Timeout = time.Minute })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ep.Handler()(ctx, message("orders", 0, 1, "k")) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("handler = %v, want context.Canceled", err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the endpoint did not see the request end")
	}
	if counts, _ := requestCounts(t, ep); len(counts) != 0 {
		t.Errorf("the cancelled request counted as %v, want no outcome", counts)
	}
}

// TestBatchAnswer: a batch answer fails some records and takes the
// others; a 4xx fails them all.
func TestBatchAnswer(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	ep, _ := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		req := readRequest(t, r)
		if len(req.Records) != 3 || req.Member != "m-1" || req.Version != WireVersion {
			t.Errorf("request %+v: want 3 records from m-1", req)
		}
		if n.Add(1) == 1 {
			io.WriteString(w, `{"results":[{"status":"done"},{"status":"failed","error":"no account"},{"status":"done"}]}`)
			return
		}
		w.WriteHeader(http.StatusBadRequest)
	})
	batch := []*kafka.Message{message("orders", 0, 1, "a"), message("orders", 0, 2, "b"), message("orders", 1, 1, "c")}
	res := ep.BatchHandler()(t.Context(), batch)
	if len(res) != 3 || res[0] != nil || res[2] != nil || res[1] == nil {
		t.Fatalf("results %v, want only the second failed", res)
	}
	res = ep.BatchHandler()(t.Context(), batch)
	for i, err := range res {
		var refused *RefusedError
		if !errors.As(err, &refused) || refused.Status != 400 {
			t.Errorf("result %d = %v, want a RefusedError 400", i, err)
		}
	}
}

// TestTraceContextSent: with a TracerProvider, the request carries the
// W3C trace context of its span, a child of the caller's.
func TestTraceContextSent(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	var parent string
	ep, _ := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		parent = r.Header.Get("traceparent")
	}, func(c *Config) { c.TracerProvider = tp })
	ctx, caller := tp.Tracer("test").Start(t.Context(), "process orders")
	if err := ep.Handler()(ctx, message("orders", 0, 1, "k")); err != nil {
		t.Fatal(err)
	}
	caller.End()
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want the request's and the caller's", len(spans))
	}
	req := spans[0]
	if req.Name != "POST" || req.Parent.SpanID() != caller.SpanContext().SpanID() {
		t.Errorf("request span %q with parent %s, want POST, child of the caller's", req.Name, req.Parent.SpanID())
	}
	want := "00-" + req.SpanContext.TraceID().String() + "-" + req.SpanContext.SpanID().String() + "-01"
	if parent != want {
		t.Errorf("traceparent %q, want %q", parent, want)
	}
}

// TestRedirectNotFollowed: a 302 would make the POST a GET; the handler
// does not follow it, and sends the record again as a POST.
func TestRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	var posts, gets atomic.Int32
	ep, _ := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			gets.Add(1)
			return // a 200: the records would count as done
		}
		if posts.Add(1) == 1 {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}
	})
	if err := ep.Handler()(t.Context(), message("orders", 0, 1, "k")); err != nil {
		t.Fatal(err)
	}
	if posts.Load() != 2 || gets.Load() != 0 {
		t.Errorf("%d POSTs and %d GETs, want 2 POSTs (the redirect answered as trouble) and no GET", posts.Load(), gets.Load())
	}
}

// requestCounts is the requests counted per outcome, and the calls waiting.
func requestCounts(t *testing.T, ep *Endpoint) (map[string]float64, float64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(ep.Collector())
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byOutcome, waiting := map[string]float64{}, 0.0
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "keyshare_deliver_requests_total":
				byOutcome[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			case "keyshare_deliver_waiting_calls":
				waiting = m.GetGauge().GetValue()
			}
		}
	}
	return byOutcome, waiting
}
