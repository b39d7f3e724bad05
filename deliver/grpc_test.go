package deliver

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/deliver/deliverpb"
)

// deliveryFunc is a test's Delivery service.
type deliveryFunc func(ctx context.Context, req *deliverpb.DeliverRequest) (*deliverpb.DeliverResponse, error)

type deliveryServer struct {
	deliverpb.UnimplementedDeliveryServer
	serve deliveryFunc
}

func (s *deliveryServer) Deliver(ctx context.Context, req *deliverpb.DeliverRequest) (*deliverpb.DeliverResponse, error) {
	return s.serve(ctx, req)
}

// serveGRPC serves serve on ln until the test ends or the returned stop.
func serveGRPC(t *testing.T, ln net.Listener, serve deliveryFunc, opts ...grpc.ServerOption) (stop func()) {
	t.Helper()
	srv := grpc.NewServer(opts...)
	deliverpb.RegisterDeliveryServer(srv, &deliveryServer{serve: serve})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			srv.Stop()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}

func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// newGRPCEndpoint starts a gRPC server running serve on a free port and an
// Endpoint for it with short waits.
func newGRPCEndpoint(t *testing.T, serve deliveryFunc, mutate ...func(*Config)) (*Endpoint, string) {
	t.Helper()
	ln := listen(t, "127.0.0.1:0")
	serveGRPC(t, ln, serve)
	addr := ln.Addr().String()
	cfg := Config{URL: "grpc://" + addr, MemberID: "m-1", Timeout: 2 * time.Second,
		Backoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond, MaxRetryAfter: 20 * time.Millisecond}
	for _, m := range mutate {
		m(&cfg)
	}
	ep, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ep.Close)
	return ep, addr
}

func results(statuses ...deliverpb.RecordStatus) *deliverpb.DeliverResponse {
	resp := &deliverpb.DeliverResponse{}
	for _, s := range statuses {
		r := &deliverpb.Result{Status: s}
		if s != deliverpb.RecordStatus_RECORD_STATUS_DONE {
			r.Error = "no account \x1b[31m"
		}
		resp.Results = append(resp.Results, r)
	}
	return resp
}

const (
	done   = deliverpb.RecordStatus_RECORD_STATUS_DONE
	failed = deliverpb.RecordStatus_RECORD_STATUS_FAILED
	fenced = deliverpb.RecordStatus_RECORD_STATUS_FENCED
)

// TestGRPCRefusedRecordFails: InvalidArgument fails the record with the
// endpoint's message escaped, the token travels in the call's metadata,
// and the attempt counts as over HTTP (TestRefusedRecordFails).
func TestGRPCRefusedRecordFails(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var attempts []int32
	refuse := true
	ep, _ := newGRPCEndpoint(t, func(ctx context.Context, req *deliverpb.DeliverRequest) (*deliverpb.DeliverResponse, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer s3cret" || req.GetMember() != "m-1" {
			t.Errorf("metadata authorization %q, member %q: want the configured token from m-1", got, req.GetMember())
		}
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, req.GetRecords()[0].GetAttempt())
		if refuse {
			return nil, status.Error(codes.InvalidArgument, "amount \x1b[31mnegative")
		}
		return &deliverpb.DeliverResponse{}, nil
	}, func(c *Config) { c.Header = map[string][]string{"Authorization": {"Bearer s3cret"}} })
	h, m := ep.Handler(), message("orders", 0, 5, "k")
	for range 2 {
		err := h(t.Context(), m)
		var refused *RefusedError
		if !errors.As(err, &refused) || refused.Code != "InvalidArgument" || refused.Body != `"amount \x1b[31mnegative"` {
			t.Fatalf("handler = %v, want a RefusedError InvalidArgument with the escaped message", err)
		}
		if want := `deliver: the endpoint refused the record (gRPC InvalidArgument): "amount \x1b[31mnegative"`; err.Error() != want {
			t.Errorf("error %q, want %q", err, want)
		}
	}
	mu.Lock()
	refuse = false
	mu.Unlock()
	for range 2 {
		if err := h(t.Context(), m); err != nil {
			t.Fatalf("handler after the endpoint took the record: %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []int32{1, 2, 3, 1}; len(attempts) != 4 || attempts[0] != 1 || attempts[1] != 2 || attempts[2] != 3 || attempts[3] != 1 {
		t.Errorf("attempts the endpoint saw %v, want %v", attempts, want)
	}
	if counts, _ := requestCounts(t, ep); counts["refused"] != 2 || counts["done"] != 2 {
		t.Errorf("requests by outcome %v, want 2 refused, 2 done", counts)
	}
}

// TestGRPCBatchResults: per-record results fail, fence and take records
// of a batch, as a batch answer's over HTTP; no results at all means all
// done; a fenced or failed record's next call is its attempt 2.
func TestGRPCBatchResults(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	var second *deliverpb.DeliverRequest
	ep, _ := newGRPCEndpoint(t, func(_ context.Context, req *deliverpb.DeliverRequest) (*deliverpb.DeliverResponse, error) {
		if len(req.GetRecords()) != 3 {
			t.Errorf("%d records, want the batch's 3", len(req.GetRecords()))
		}
		if n.Add(1) == 1 {
			return results(done, fenced, failed), nil
		}
		second = req
		return &deliverpb.DeliverResponse{}, nil
	})
	batch := []*kafka.Message{message("orders", 0, 1, "a"), message("orders", 0, 2, "b"), message("orders", 1, 1, "c")}
	res := ep.BatchHandler()(t.Context(), batch)
	var fe *FencedError
	var refused *RefusedError
	if len(res) != 3 || res[0] != nil {
		t.Fatalf("results %v, want the first done", res)
	}
	if !errors.Is(res[1], consumer.ErrFenced) || !errors.As(res[1], &fe) || errors.As(res[1], &refused) || fe.Body != `"no account \x1b[31m"` {
		t.Errorf("fenced result = %v: want a *FencedError matching consumer.ErrFenced with the escaped text", res[1])
	}
	if !errors.As(res[2], &refused) || refused.Code != "OK" || errors.Is(res[2], consumer.ErrFenced) ||
		res[2].Error() != `deliver: the endpoint failed the record: "no account \x1b[31m"` {
		t.Errorf("failed result = %v: want a RefusedError of an OK call, not fenced", res[2])
	}
	if got := recordCounts(t, ep); got["done"] != 1 || got["fenced"] != 1 || got["failed"] != 1 {
		t.Errorf("records counted %v, want done 1, fenced 1, failed 1", got)
	}
	if res := ep.BatchHandler()(t.Context(), batch); res[0] != nil || res[1] != nil || res[2] != nil {
		t.Fatalf("second call's results %v, want all done (no results in the answer)", res)
	}
	if r := second.GetRecords(); r[0].GetAttempt() != 1 || r[1].GetAttempt() != 2 || r[2].GetAttempt() != 2 {
		t.Errorf("second call's attempts %d %d %d, want 1 2 2", r[0].GetAttempt(), r[1].GetAttempt(), r[2].GetAttempt())
	}
}

// TestGRPCBadResultsWait: results that are not one per record, or a
// status unset or unknown, are the endpoint's trouble: the call is made
// again, nothing failed.
func TestGRPCBadResultsWait(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	ep, _ := newGRPCEndpoint(t, func(context.Context, *deliverpb.DeliverRequest) (*deliverpb.DeliverResponse, error) {
		switch n.Add(1) {
		case 1:
			return results(done, done), nil // two results for one record
		case 2:
			return results(deliverpb.RecordStatus_RECORD_STATUS_UNSPECIFIED), nil
		case 3:
			return results(deliverpb.RecordStatus(7)), nil // a status from a later release
		}
		return results(done), nil
	})
	if err := ep.Handler()(t.Context(), message("orders", 0, 1, "k")); err != nil {
		t.Fatalf("handler = %v, want nil once the endpoint answered done", err)
	}
	if counts, waiting := requestCounts(t, ep); n.Load() != 4 || counts["trouble"] != 3 || counts["done"] != 1 || waiting != 0 {
		t.Errorf("%d calls, by outcome %v, %v waiting; want 4: 3 trouble, then done", n.Load(), counts, waiting)
	}
}

// TestGRPCStatusCodes: every status code of a whole call, answered once
// before an OK: the codes that refuse the records fail them; every other
// is the endpoint's trouble, waited out with nothing failed.
func TestGRPCStatusCodes(t *testing.T) {
	t.Parallel()
	refusing := map[codes.Code]bool{codes.InvalidArgument: true, codes.FailedPrecondition: true, codes.OutOfRange: true, codes.AlreadyExists: true}
	for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			var n atomic.Int32
			ep, _ := newGRPCEndpoint(t, func(context.Context, *deliverpb.DeliverRequest) (*deliverpb.DeliverResponse, error) {
				if n.Add(1) == 1 {
					return nil, status.Error(c, "no")
				}
				return results(done), nil
			})
			err := ep.Handler()(t.Context(), message("orders", 0, 1, "k"))
			var refused *RefusedError
			switch {
			case refusing[c] && (!errors.As(err, &refused) || refused.Code != c.String() || n.Load() != 1):
				t.Errorf("handler = %v after %d calls, want the record refused (%s) after one", err, n.Load(), c)
			case !refusing[c] && (err != nil || n.Load() != 2):
				t.Errorf("handler = %v after %d calls, want the endpoint's trouble waited out: nil after 2", err, n.Load())
			}
		})
	}
}

// TestGRPCTroubleWaitsForAnswer: Unavailable with a pushback far above
// the cap, ResourceExhausted, Unauthenticated, Unimplemented (a server
// without the service) and a call past the timeout: the handler calls
// again until the record is taken, not ready meanwhile.
func TestGRPCTroubleWaitsForAnswer(t *testing.T) {
	t.Parallel()
	var n, notReady atomic.Int32
	var ep *Endpoint
	ep, _ = newGRPCEndpoint(t, func(ctx context.Context, _ *deliverpb.DeliverRequest) (*deliverpb.DeliverResponse, error) {
		i := n.Add(1)
		if i > 1 && ep.Ready() != nil {
			notReady.Add(1)
		}
		switch i {
		case 1:
			_ = grpc.SetTrailer(ctx, metadata.Pairs(pushbackKey, "3600000"))
			return nil, status.Error(codes.Unavailable, "draining")
		case 2:
			return nil, status.Error(codes.ResourceExhausted, "slow down")
		case 3:
			return nil, status.Error(codes.Unauthenticated, "who are you")
		case 4:
			return nil, status.Error(codes.Unimplemented, "unknown service keyshare.deliver.v1.Delivery")
		case 5:
			<-ctx.Done() // beyond Timeout
			return nil, ctx.Err()
		}
		return &deliverpb.DeliverResponse{}, nil
	}, func(c *Config) { c.Timeout = 100 * time.Millisecond })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := ep.Handler()(ctx, message("orders", 0, 1, "k")); err != nil {
		t.Fatalf("handler = %v, want nil once the endpoint takes the record", err)
	}
	if got := n.Load(); got != 6 {
		t.Errorf("%d calls, want 6 (5 in trouble, then the one taken)", got)
	}
	if got := notReady.Load(); got != 5 {
		t.Errorf("Ready said not ready during %d of the 5 calls after the first trouble", got)
	}
	if counts, waiting := requestCounts(t, ep); counts["trouble"] != 5 || counts["done"] != 1 || len(counts) != 2 || waiting != 0 {
		t.Errorf("requests by outcome %v, %g calls waiting; want 5 in trouble, 1 done, none waiting", counts, waiting)
	}
}

// TestGRPCPushbackSetsWait: a grpc-retry-pushback-ms trailer on a call in
// trouble replaces the backoff's wait.
func TestGRPCPushbackSetsWait(t *testing.T) {
	t.Parallel()
	var first time.Time
	var gap time.Duration
	var n atomic.Int32
	ep, _ := newGRPCEndpoint(t, func(ctx context.Context, _ *deliverpb.DeliverRequest) (*deliverpb.DeliverResponse, error) {
		if n.Add(1) == 1 {
			first = time.Now()
			_ = grpc.SetTrailer(ctx, metadata.Pairs(pushbackKey, "300"))
			return nil, status.Error(codes.Unavailable, "busy")
		}
		gap = time.Since(first)
		return &deliverpb.DeliverResponse{}, nil
	}, func(c *Config) { c.MaxRetryAfter = time.Minute })
	if err := ep.Handler()(t.Context(), message("orders", 0, 1, "k")); err != nil {
		t.Fatal(err)
	}
	if gap < 300*time.Millisecond {
		t.Errorf("second call %s after the first, want at least the 300 ms the trailer asked for (the backoff is 1 ms)", gap)
	}
}

func TestPushback(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		values []string
		want   time.Duration
		ok     bool
	}{
		{nil, 0, false},
		{[]string{"250"}, 250 * time.Millisecond, true},
		{[]string{"0"}, 0, true},
		{[]string{"99999999999999"}, time.Second, true}, // capped
		{[]string{"-1"}, 0, false},                      // "do not retry": the records wait on the backoff
		{[]string{"soon"}, 0, false},
		{[]string{"10", "20"}, 0, false},
	} {
		md := metadata.MD{}
		if c.values != nil {
			md[pushbackKey] = c.values
		}
		if got, ok := pushback(md, time.Second); got != c.want || ok != c.ok {
			t.Errorf("pushback %q = %s, %t; want %s, %t", c.values, got, ok, c.want, c.ok)
		}
	}
}
