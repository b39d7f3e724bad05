package deliver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"go.opentelemetry.io/otel/propagation"

	"github.com/keyshare/keyshare/consumer"
)

// httpTransport POSTs each request's JSON body (wire.go) to an http:// or
// https:// URL.
type httpTransport struct {
	url     string
	shown   string // url without its query, for spans
	header  http.Header
	client  *http.Client
	tracing *tracing // nil: no TracerProvider
	// maxRetryAfter caps the wait a Retry-After header asks for.
	maxRetryAfter time.Duration
}

// Liveness of a connection a request waits on: with no Timeout set, these
// are what find an endpoint that died or a network that broke under a
// request (deadline.go). An endpoint that is alive but slow answers them.
var (
	// keepAlive probes an idle TCP connection (a request waiting for its
	// answer is one) after 15 s, then every 5 s: a peer that is gone is
	// found within about 30 s.
	keepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3}
	// http2Pings pings an HTTP/2 connection (https:// endpoints that
	// speak it) after 30 s without a frame, and closes it when the ping's
	// answer takes over 15 s: this finds a peer whose kernel still
	// answers TCP but whose server no longer reads.
	http2Pings = &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second}
)

// dialTimeout bounds opening a connection to the endpoint (net/http's
// default transport has the same).
const dialTimeout = 30 * time.Second

func newHTTPTransport(cfg Config, shown string, tracing *tracing) *httpTransport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: dialTimeout, KeepAliveConfig: keepAlive}).DialContext
	tr.HTTP2 = http2Pings
	tr.TLSClientConfig = cfg.TLS
	tr.MaxResponseHeaderBytes = maxHeaderBytes
	tr.Proxy = nil // an endpoint is reached directly, not through the environment's proxy
	// Every worker may have a request open at once: keep their
	// connections instead of opening one per request.
	tr.MaxIdleConnsPerHost = 1024
	tr.MaxIdleConns = 1024
	return &httpTransport{
		url: cfg.URL, shown: shown, header: cfg.Header, tracing: tracing, maxRetryAfter: cfg.MaxRetryAfter,
		// A redirect is not followed: a 302 or 303 would turn the POST
		// into a GET whose 2xx would count the records as done.
		client: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}},
	}
}

func (h *httpTransport) close() { h.client.CloseIdleConnections() }

func (h *httpTransport) prepare(member string, msgs []*kafka.Message, attempts []int, fences []fence, states []sentState) (call, error) {
	body, err := encodeRequest(member, msgs, attempts, fences, states)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, deadline time.Time) reply { return h.send(ctx, deadline, body, states) }, nil
}

// maxAnswer bounds the body read from an answer: results of a large batch
// fit many times over.
const maxAnswer = 4 << 20

// maxErrorAnswer bounds the body read from an answer that is not a 2xx:
// an error keeps only maxErrorBody of it.
const maxErrorAnswer = 4 << 10

// maxHeaderBytes bounds an answer's headers (Go's default is 10 MB): the
// member reads only Retry-After and Content-Type of them.
const maxHeaderBytes = 16 << 10

// send POSTs body, a request of len(states) records, states what it
// tells of their key states. With a deadline, it tells the endpoint in
// DeadlineHeader and waits for the answer until DeadlineGrace after it.
func (h *httpTransport) send(ctx context.Context, deadline time.Time, body []byte, states []sentState) (r reply) {
	n := len(states)
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(DeadlineGrace))
		defer cancel()
	}
	status := 0
	if h.tracing != nil {
		var end func(int, error)
		ctx, end = h.tracing.start(ctx, h.shown, n)
		defer func() { end(status, r.err) }()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return reply{err: err}
	}
	for k, vs := range h.header {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	if !deadline.IsZero() {
		req.Header.Set(DeadlineHeader, deadlineValue(deadline))
	}
	if h.tracing != nil {
		h.tracing.inject(ctx, propagation.HeaderCarrier(req.Header))
	}
	var wrote atomic.Bool // the request's headers went out: the endpoint may have it
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteHeaders: func() { wrote.Store(true) },
	}))
	resp, err := h.client.Do(req)
	if err != nil {
		// Without the URL a *url.Error repeats (with its query): logs and
		// /readyz name the endpoint by its shown URL.
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = ue.Err
		}
		return reply{err: err, inDoubt: wrote.Load()}
	}
	defer resp.Body.Close()
	status = resp.StatusCode
	limit := int64(maxAnswer)
	if classify(status) != outcomeDone {
		limit = maxErrorAnswer // the rest is never read: the connection is closed
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return reply{err: fmt.Errorf("reading the answer (%d): %w", status, err)}
	}
	if classify(status) == outcomeDone && len(answer) > maxAnswer {
		return reply{err: fmt.Errorf("%w: longer than %d bytes", errBadAnswer, maxAnswer)}
	}
	switch classify(status) {
	case outcomeDone:
		results, changes, err := decodeAnswer(answer, states)
		if err != nil {
			return reply{err: err}
		}
		return reply{results: results, changes: changes}
	case outcomeRefused:
		return reply{results: consumer.FailAll(n, &RefusedError{Status: status, Body: safeBody(answer)}), refused: true}
	}
	wait, _ := retryAfter(resp.Header.Get("Retry-After"), time.Now(), h.maxRetryAfter)
	return reply{wait: wait, err: &troubleError{status: status, body: safeBody(answer)}}
}

// troubleError is an answer that says the endpoint is in trouble.
type troubleError struct {
	status int
	body   string
}

func (e *troubleError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.status, http.StatusText(e.status), e.body)
}
