package deliver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
)

// Endpoint delivers records to one HTTP(S) endpoint. Its handlers may run
// on many workers at once.
type Endpoint struct {
	cfg      Config
	shown    string // the URL without its query, for logs, errors and spans
	client   *http.Client
	metrics  *metrics
	tracing  *tracing // nil: no TracerProvider
	attempts attemptCounter
	trouble  trouble
}

// New checks cfg and returns its Endpoint. It makes no request.
func New(cfg Config) (*Endpoint, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg.TLS
	tr.Proxy = nil // an endpoint is reached directly, not through the environment's proxy
	// Every worker may have a request open at once: keep their
	// connections instead of opening one per request.
	tr.MaxIdleConnsPerHost = 1024
	tr.MaxIdleConns = 1024
	e := &Endpoint{
		cfg:   cfg,
		shown: shownURL(cfg.URL),
		// A redirect is not followed: a 302 or 303 would turn the POST
		// into a GET whose 2xx would count the records as done.
		client: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}},
		metrics: newMetrics(),
		tracing: newTracing(cfg.TracerProvider),
	}
	e.trouble.log = cfg.Logger
	e.trouble.url = e.shown
	e.trouble.waiting = e.metrics.waiting
	return e, nil
}

// Handler returns the consumer.Handler that delivers each record in a
// request of its own.
func (e *Endpoint) Handler() consumer.Handler {
	return func(ctx context.Context, m *kafka.Message) error {
		return e.deliver(ctx, []*kafka.Message{m})[0]
	}
}

// BatchHandler returns the consumer.BatchHandler that delivers each batch
// in one request; the answer may say per record what happened.
func (e *Endpoint) BatchHandler() consumer.BatchHandler {
	return func(ctx context.Context, batch []*kafka.Message) []error {
		return e.deliver(ctx, batch)
	}
}

// Ready is nil while the endpoint answers, and says why not while some
// request is waiting for it (since when, and the last failure).
func (e *Endpoint) Ready() error { return e.trouble.err() }

// Close closes the connections kept for later requests.
func (e *Endpoint) Close() { e.client.CloseIdleConnections() }

// deliver sends msgs until the endpoint answers or ctx ends, and returns a
// result per record: nil when done, a *RefusedError when the endpoint
// refused it, ctx's error when the member must stop working on it.
func (e *Endpoint) deliver(ctx context.Context, msgs []*kafka.Message) []error {
	fences := make([]fence, len(msgs))
	for i, m := range msgs {
		fences[i] = fenceOf(ctx, m)
	}
	body, err := encodeRequest(e.cfg.MemberID, msgs, e.attempts.next(msgs), fences)
	if err != nil {
		return consumer.FailAll(len(msgs), fmt.Errorf("deliver: encoding the request: %w", err))
	}
	backoff := e.cfg.Backoff
	waiting := false
	defer func() {
		if waiting {
			e.trouble.leave()
		}
	}()
	for {
		res, wait, err := e.send(ctx, body, len(msgs))
		if res != nil {
			e.attempts.settle(msgs, res)
			e.metrics.countRecords(res)
			return res
		}
		if ctx.Err() != nil {
			e.attempts.forget(msgs)
			return consumer.FailAll(len(msgs), ctx.Err())
		}
		if !waiting {
			waiting = true
			e.trouble.enter(err)
		} else {
			e.trouble.note(err)
		}
		if wait == 0 {
			wait = backoff/2 + rand.N(backoff/2+1)
			backoff = min(2*backoff, e.cfg.MaxBackoff)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			e.attempts.forget(msgs)
			return consumer.FailAll(len(msgs), ctx.Err())
		}
	}
}

// maxAnswer bounds the body read from an answer: results of a large batch
// fit many times over.
const maxAnswer = 4 << 20

// send makes one request. It returns the records' results when the
// endpoint answered about them, else the endpoint's trouble and the wait
// its Retry-After asked for (0 if none).
func (e *Endpoint) send(parent context.Context, body []byte, n int) (res []error, wait time.Duration, err error) {
	ctx, cancel := context.WithTimeout(parent, e.cfg.Timeout)
	defer cancel()
	start := time.Now()
	status := 0
	if e.tracing != nil {
		var end func(int, error)
		ctx, end = e.tracing.start(ctx, e.shown, n)
		defer func() { end(status, err) }()
	}
	defer func() {
		o := outcomeDone
		switch {
		case res == nil && parent.Err() != nil:
			return // cancelled: neither the endpoint's answer nor its trouble
		case res == nil:
			o = outcomeTrouble
		case status < 200 || status > 299:
			o = outcomeRefused
		}
		e.metrics.observe(o, time.Since(start))
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	for k, vs := range e.cfg.Header {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	if e.tracing != nil {
		e.tracing.inject(ctx, req.Header)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		// Without the URL a *url.Error repeats (with its query): logs and
		// /readyz name the endpoint by e.shown.
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = ue.Err
		}
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %s (the request timeout)", e.cfg.Timeout)
		}
		return nil, 0, err
	}
	defer resp.Body.Close()
	status = resp.StatusCode
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, 0, fmt.Errorf("reading the answer (%d): %w", status, err)
	}
	if len(answer) > maxAnswer {
		return nil, 0, fmt.Errorf("%w: longer than %d bytes", errBadAnswer, maxAnswer)
	}
	switch classify(status) {
	case outcomeDone:
		results, err := decodeAnswer(answer, n)
		if err != nil {
			return nil, 0, err
		}
		return results, 0, nil
	case outcomeRefused:
		return consumer.FailAll(n, &RefusedError{Status: status, Body: safeBody(answer)}), 0, nil
	}
	wait, _ = retryAfter(resp.Header.Get("Retry-After"), time.Now(), e.cfg.MaxRetryAfter)
	return nil, wait, &troubleError{status: status, body: safeBody(answer)}
}

// troubleError is an answer that says the endpoint is in trouble.
type troubleError struct {
	status int
	body   string
}

func (e *troubleError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.status, http.StatusText(e.status), e.body)
}

// shownURL is raw without its query and fragment, which may carry a
// secret (an API key parameter).
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unreadable URL)"
	}
	if u.RawQuery != "" || u.Fragment != "" {
		u.RawQuery, u.Fragment = "", ""
		return u.String() + "?..."
	}
	return u.String()
}

// String is the endpoint's URL without its query, as logs name it.
func (e *Endpoint) String() string { return e.shown }
