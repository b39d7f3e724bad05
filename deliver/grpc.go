package deliver

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/deliver/deliverpb"
)

// deliverMethod is the one method a gRPC endpoint serves, as spans name it.
const deliverMethod = "keyshare.deliver.v1.Delivery/Deliver"

// isGRPC reports whether raw (a checked URL) names a gRPC endpoint.
func isGRPC(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (u.Scheme == "grpc" || u.Scheme == "grpcs")
}

// grpcTransport calls Delivery.Deliver (deliverpb/deliver.proto) on a
// grpc:// (plaintext) or grpcs:// (TLS) endpoint, over one connection that
// carries every worker's calls at once.
type grpcTransport struct {
	conn    *grpc.ClientConn
	client  deliverpb.DeliveryClient
	md      metadata.MD // Config.Header
	host    string
	port    int
	tracing *tracing // nil: no TracerProvider
	// maxPushback caps the wait a grpc-retry-pushback-ms trailer asks for.
	maxPushback time.Duration
}

// grpcPings pings the connection while calls wait on it, every 5 minutes:
// the least interval a gRPC server accepts by default (grpc-go's and
// grpcio's enforcement policy; one pinged more often answers GOAWAY
// too_many_pings, which would end a slow endpoint's calls). An answer
// later than 20 s closes the connection. TCP keepalive (keepAlive, in
// http.go) finds a peer that is gone sooner.
var grpcPings = keepalive.ClientParameters{Time: 5 * time.Minute, Timeout: 20 * time.Second}

// grpcDialTimeout bounds one attempt to connect (gRPC's own default).
const grpcDialTimeout = 20 * time.Second

func newGRPCTransport(cfg Config, tracing *tracing) (*grpcTransport, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: URL %q: %v", ErrConfig, redactedURL(cfg.URL), err)
	}
	md, err := metadataOf(cfg.Header)
	if err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if u.Scheme == "grpcs" {
		tc := cfg.TLS
		if tc == nil {
			tc = &tls.Config{MinVersion: tls.VersionTLS12} // the system's CAs, as https:// with no TLS
		}
		creds = credentials.NewTLS(tc)
	}
	dialer := &net.Dialer{KeepAliveConfig: keepAlive}
	conn, err := grpc.NewClient("dns:///"+u.Host,
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dialer.DialContext(ctx, "tcp", addr)
		}),
		grpc.WithKeepaliveParams(grpcPings),
		grpc.WithNoProxy(),              // an endpoint is reached directly, as over HTTP
		grpc.WithDisableServiceConfig(), // no retry policy from DNS: the handler retries itself
		grpc.WithConnectParams(grpc.ConnectParams{
			// Reconnect on the handler's backoff, so that an endpoint back
			// up is called again within MaxBackoff (grpc-go's default waits
			// up to 2 minutes).
			Backoff:           backoff.Config{BaseDelay: cfg.Backoff, Multiplier: 2, Jitter: 0.2, MaxDelay: cfg.MaxBackoff},
			MinConnectTimeout: grpcDialTimeout,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxAnswer)),
		grpc.WithMaxHeaderListSize(maxHeaderBytes),
	)
	if err != nil {
		return nil, fmt.Errorf("%w: URL %q: %v", ErrConfig, redactedURL(cfg.URL), err)
	}
	port, _ := strconv.Atoi(u.Port())
	return &grpcTransport{conn: conn, client: deliverpb.NewDeliveryClient(conn), md: md,
		host: u.Hostname(), port: port, tracing: tracing, maxPushback: cfg.MaxRetryAfter}, nil
}

func (g *grpcTransport) close() { _ = g.conn.Close() }

func (g *grpcTransport) prepare(member string, msgs []*kafka.Message, attempts []int, fences []fence, states []sentState) (call, error) {
	req := encodeProto(member, msgs, attempts, fences, states)
	return func(ctx context.Context, deadline time.Time) reply { return g.send(ctx, deadline, req, states) }, nil
}

// send calls Deliver with req, a request of len(states) records, states
// what it tells of their key states; a deadline is the call's.
func (g *grpcTransport) send(ctx context.Context, deadline time.Time, req *deliverpb.DeliverRequest, states []sentState) (r reply) {
	n := len(states)
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	md := g.md.Copy()
	code := codes.OK
	if g.tracing != nil {
		var end func(codes.Code, error)
		ctx, end = g.tracing.startRPC(ctx, g.host, g.port, n)
		defer func() { end(code, r.err) }()
		g.tracing.inject(ctx, metadataCarrier(md))
	}
	var trailer metadata.MD
	var reached peer.Peer // set when the call had a stream: the endpoint may have it
	resp, err := g.client.Deliver(metadata.NewOutgoingContext(ctx, md), req, grpc.Trailer(&trailer), grpc.Peer(&reached))
	if err == nil {
		results, changes, err := decodeResults(resp.GetResults(), states)
		if err != nil {
			return reply{err: err}
		}
		return reply{results: results, changes: changes}
	}
	st := status.Convert(err)
	code = st.Code()
	if classifyCode(code) == outcomeRefused {
		return reply{results: consumer.FailAll(n, &RefusedError{Code: code.String(), Body: safeBody([]byte(st.Message()))}), refused: true}
	}
	wait, _ := pushback(trailer, g.maxPushback)
	return reply{wait: wait, inDoubt: reached.Addr != nil && mayBeLocal(code), err: &rpcTroubleError{code: code, message: safeBody([]byte(st.Message()))}}
}

// mayBeLocal reports whether a call's status may have been made on the
// member's side, with the endpoint still working on the call: its
// deadline passed, its connection broke. A status the endpoint sent
// means it stopped; the two look alike, so these codes count as the
// member's own.
func mayBeLocal(c codes.Code) bool {
	switch c {
	case codes.DeadlineExceeded, codes.Unavailable, codes.Canceled, codes.Internal:
		return true
	}
	return false
}

// rpcTroubleError is a call's status that says the endpoint is in trouble.
type rpcTroubleError struct {
	code    codes.Code
	message string
}

func (e *rpcTroubleError) Error() string { return "gRPC " + e.code.String() + ": " + e.message }

// metadataOf is Config.Header as gRPC metadata. A name gRPC reserves or
// cannot carry is a configuration error naming it (never its value).
func metadataOf(h http.Header) (metadata.MD, error) {
	md := metadata.MD{}
	for name, values := range h {
		key := strings.ToLower(name)
		switch {
		case !metadataKey(key):
			return nil, fmt.Errorf("%w: header %q cannot be gRPC metadata: a name takes only letters, digits, '-', '_' and '.'", ErrConfig, name)
		case strings.HasPrefix(key, "grpc-"), key == "te", key == "content-type",
			key == "traceparent", key == "tracestate":
			return nil, fmt.Errorf("%w: header %q: the member's gRPC client sets it itself", ErrConfig, name)
		}
		for _, v := range values {
			if !strings.HasSuffix(key, "-bin") && !printable(v) {
				return nil, fmt.Errorf("%w: header %q: its value holds characters gRPC metadata cannot carry (not shown)", ErrConfig, name)
			}
		}
		md[key] = append(md[key], values...)
	}
	return md, nil
}

// metadataKey reports whether s is a valid gRPC metadata key.
func metadataKey(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// printable reports whether s is printable ASCII, spaces included.
func printable(s string) bool {
	for _, r := range s {
		if r < ' ' || r > '~' {
			return false
		}
	}
	return true
}

// metadataCarrier lets the W3C propagator write into gRPC metadata.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
