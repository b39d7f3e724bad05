package deliver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/keyshare/keyshare/deliver/deliverpb"
	"github.com/keyshare/keyshare/testutil"
)

// TestGRPCServerRestart: the endpoint's server stops while a record
// waits and comes back on the same port: the handler waits it out (not
// ready meanwhile) and the record is taken; nothing fails.
func TestGRPCServerRestart(t *testing.T) {
	t.Parallel()
	var taken atomic.Int32
	serve := func(context.Context, *deliverpb.DeliverRequest) (*deliverpb.DeliverResponse, error) {
		taken.Add(1)
		return results(done), nil
	}
	ln := listen(t, "127.0.0.1:0")
	addr := ln.Addr().String()
	stop := serveGRPC(t, ln, serve)
	ep, err := New(Config{URL: "grpc://" + addr, Backoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	h := ep.Handler()
	if err := h(t.Context(), message("orders", 0, 1, "k")); err != nil {
		t.Fatal(err)
	}
	stop()
	result := make(chan error, 1)
	go func() { result <- h(t.Context(), message("orders", 0, 2, "k")) }()
	testutil.WaitFor(t, "the endpoint reported not answering", 10*time.Second, func() bool { return ep.Ready() != nil })
	if msg := ep.Ready().Error(); !strings.Contains(msg, "delivery endpoint grpc://"+addr+" not answering") || !strings.Contains(msg, "gRPC Unavailable") {
		t.Errorf("Ready = %q: want the endpoint and its status", msg)
	}
	time.Sleep(200 * time.Millisecond) // down a while: many calls, each in trouble
	serveGRPC(t, listen(t, addr), serve)
	select {
	case err := <-result:
		if err != nil {
			t.Fatalf("handler = %v, want nil once the endpoint is back", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the record was not delivered after the endpoint came back")
	}
	if taken.Load() != 2 || ep.Ready() != nil {
		t.Errorf("%d records taken, Ready %v; want 2 and ready", taken.Load(), ep.Ready())
	}
	if counts, waiting := requestCounts(t, ep); counts["trouble"] == 0 || counts["done"] != 2 || counts["refused"] != 0 || waiting != 0 {
		t.Errorf("requests by outcome %v, %g waiting; want trouble, 2 done, nothing refused or waiting", counts, waiting)
	}
	if got := recordCounts(t, ep); got["failed"] != 0 || got["done"] != 2 {
		t.Errorf("records %v, want 2 done, none failed", got)
	}
}

// TestGRPCCancelEndsCall: a record whose context ends while the endpoint
// works on it: the call is cancelled, the server sees it end, and it is
// counted as no outcome.
func TestGRPCCancelEndsCall(t *testing.T) {
	t.Parallel()
	closed := make(chan struct{})
	ep, _ := newGRPCEndpoint(t, func(ctx context.Context, _ *deliverpb.DeliverRequest) (*deliverpb.DeliverResponse, error) {
		<-ctx.Done()
		if errors.Is(ctx.Err(), context.Canceled) {
			close(closed)
		}
		return nil, ctx.Err()
	}, func(c *Config) { c.Timeout = time.Minute })
	ctx, cancel := context.WithCancel(t.Context())
	result := make(chan error, 1)
	go func() { result <- ep.Handler()(ctx, message("orders", 0, 1, "k")) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-result; !errors.Is(err, context.Canceled) {
		t.Fatalf("handler = %v, want context.Canceled", err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the endpoint did not see the call cancelled")
	}
	if counts, _ := requestCounts(t, ep); len(counts) != 0 {
		t.Errorf("the cancelled call counted as %v, want no outcome", counts)
	}
}

// TestGRPCOverTLS: a grpcs:// endpoint that wants a client certificate
// from the test's CA: Config.TLS as for https://, the token in metadata.
func TestGRPCOverTLS(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t, "deliver")
	now := time.Now()
	srvCert, srvKey := ca.Issue(t, "endpoint", true, now.Add(-time.Hour), now.Add(time.Hour))
	cliCert, cliKey := ca.Issue(t, "member", false, now.Add(-time.Hour), now.Add(time.Hour))
	pem, err := os.ReadFile(ca.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	srvPair, err := tls.LoadX509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	cliPair, err := tls.LoadX509KeyPair(cliCert, cliKey)
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t, "127.0.0.1:0")
	var peers atomic.Int32
	serveGRPC(t, ln, func(ctx context.Context, _ *deliverpb.DeliverRequest) (*deliverpb.DeliverResponse, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if p, ok := peer.FromContext(ctx); ok {
			if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 &&
				info.State.PeerCertificates[0].Subject.CommonName == "member" {
				peers.Add(1)
			}
		}
		if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer tok-123" {
			return nil, status.Error(codes.Unauthenticated, "who are you")
		}
		return results(done), nil
	}, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{srvPair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})))
	ep, err := New(Config{URL: "grpcs://localhost:" + strings.Split(ln.Addr().String(), ":")[1],
		TLS:    &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cliPair}, MinVersion: tls.VersionTLS12},
		Header: map[string][]string{"Authorization": {"Bearer tok-123"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := ep.Handler()(ctx, message("orders", 0, 1, "k")); err != nil {
		t.Fatalf("handler = %v (ready: %v), want the record taken over TLS", err, ep.Ready())
	}
	if peers.Load() != 1 {
		t.Errorf("the endpoint saw the member's certificate on %d calls, want 1", peers.Load())
	}
}

// TestGRPCTraceContextSent: with a TracerProvider, the call carries the
// W3C trace context of its span, a child of the caller's, in metadata.
func TestGRPCTraceContextSent(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	var parent []string
	ep, _ := newGRPCEndpoint(t, func(ctx context.Context, _ *deliverpb.DeliverRequest) (*deliverpb.DeliverResponse, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		parent = md.Get("traceparent")
		return &deliverpb.DeliverResponse{}, nil
	}, func(c *Config) { c.TracerProvider = tp })
	ctx, caller := tp.Tracer("test").Start(t.Context(), "process orders")
	if err := ep.Handler()(ctx, message("orders", 0, 1, "k")); err != nil {
		t.Fatal(err)
	}
	caller.End()
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want the call's and the caller's", len(spans))
	}
	call := spans[0]
	if call.Name != "keyshare.deliver.v1.Delivery/Deliver" || call.Parent.SpanID() != caller.SpanContext().SpanID() {
		t.Errorf("call span %q with parent %s, want the method, child of the caller's", call.Name, call.Parent.SpanID())
	}
	want := "00-" + call.SpanContext.TraceID().String() + "-" + call.SpanContext.SpanID().String() + "-01"
	if len(parent) != 1 || parent[0] != want {
		t.Errorf("traceparent %q, want %q", parent, want)
	}
	found := false
	for _, a := range call.Attributes {
		if a.Key == "rpc.response.status_code" && a.Value.AsString() == "OK" {
			found = true
		}
	}
	if !found {
		t.Errorf("call span attributes %v lack rpc.response.status_code OK", call.Attributes)
	}
}

// TestGRPCConfig: a gRPC URL names host:port and nothing more, and its
// headers must be metadata gRPC carries; each error names what to fix.
func TestGRPCConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{URL: "grpc://sink"}, `has no port: want grpc://host:port`},
		{Config{URL: "grpcs://sink:443/records"}, `a gRPC endpoint has no path or query`},
		{Config{URL: "grpc://sink:9000?api_key=s3cret"}, `"grpc://sink:9000?..."`},
		{Config{URL: "grpc://sink:9000", Header: map[string][]string{"X-Api~Key": {"s3cret"}}}, `header "X-Api~Key" cannot be gRPC metadata`},
		{Config{URL: "grpc://sink:9000", Header: map[string][]string{"Grpc-Timeout": {"1S"}}}, `header "Grpc-Timeout": the member's gRPC client sets it itself`},
		{Config{URL: "grpc://sink:9000", Header: map[string][]string{"X-Key": {"s3cret\n"}}}, `header "X-Key": its value holds characters`},
	} {
		_, err := New(c.cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("New(%s) = %v, want ErrConfig saying %s, no secret", c.cfg.URL, err, c.want)
		}
	}
	ep, err := New(Config{URL: "GRPC://127.0.0.1:9000/", Header: map[string][]string{"Authorization": {"Bearer x"}, "X-Trace-Bin": {"\x00\x01"}}})
	if err != nil {
		t.Fatalf("New with a valid gRPC URL and headers: %v", err)
	}
	ep.Close()
}
