package deliver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
)

// Endpoint delivers records to one endpoint, over HTTP(S) or gRPC as its
// URL's scheme says. Its handlers may run on many workers at once.
type Endpoint struct {
	cfg       Config
	shown     string // the URL without its query, for logs, errors and spans
	transport transport
	metrics   *metrics
	attempts  attemptCounter
	trouble   trouble
}

// transport carries a handler call's records to the endpoint and reads
// what it answered: HTTP(S) (http.go) or gRPC (grpc.go).
type transport interface {
	// prepare encodes one request of a handler call; its call sends that
	// request, as often as the endpoint needs.
	prepare(member string, msgs []*kafka.Message, attempts []int, fences []fence, states []sentState) (call, error)
	// close closes the connections kept for later requests.
	close()
}

// call makes one request and reads its answer. ctx cancels it (the
// record's context); deadline, unless zero, is the request's deadline,
// which the call tells the endpoint and keeps to (deadline.go).
type call func(ctx context.Context, deadline time.Time) reply

// reply is what one request came to.
type reply struct {
	// results has a result per record when the endpoint answered about
	// them: nil when done, a *RefusedError or a *FencedError. It is nil
	// when the endpoint did not answer about them (its trouble, or ctx
	// ended).
	results []error
	// changes has what the answer said of each record's key state; nil
	// when it said nothing of any.
	changes []stateChange
	// refused: the endpoint refused the whole request (a 4xx; gRPC's
	// InvalidArgument and the like), for the metrics.
	refused bool
	// wait is the pause the endpoint asked for before the next try
	// (Retry-After, grpc-retry-pushback-ms); 0 for the backoff's.
	wait time.Duration
	// inDoubt: the request reached the endpoint, or may have, and no
	// answer came back, so the endpoint may still be working on it.
	inDoubt bool
	// err is why the endpoint did not answer about the records.
	err error
}

// New checks cfg and returns its Endpoint. It makes no request.
func New(cfg Config) (*Endpoint, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	e := &Endpoint{cfg: cfg, shown: shownURL(cfg.URL), metrics: newMetrics()}
	tracing := newTracing(cfg.TracerProvider)
	if isGRPC(cfg.URL) {
		e.transport, err = newGRPCTransport(cfg, tracing)
		if err != nil {
			return nil, err
		}
	} else {
		e.transport = newHTTPTransport(cfg, e.shown, tracing)
	}
	if cfg.Header.Get("Authorization") != "" && !tlsURL(cfg.URL) {
		// Said once, by the Endpoint: not per request.
		cfg.Logger.Warn("the delivery endpoint's Authorization header goes over plaintext: anyone on the network path can read it; use https:// or grpcs://", "url", e.shown)
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

// Close closes the connections kept for later requests. Call it once the
// handlers are no longer called: over gRPC, a call after Close finds the
// endpoint in trouble until its context ends.
func (e *Endpoint) Close() { e.transport.close() }

// deliver sends msgs until the endpoint answers or ctx ends, and returns a
// result per record: nil when done, a *RefusedError when the endpoint
// refused it, a *FencedError when it refused its fence, ctx's error when
// the member must stop working on it.
//
// Each request carries the next attempt number of its records, so an
// endpoint can tell a request sent again from the one before it. A
// request the endpoint may still be working on is not sent again before
// its deadline and DeadlineGrace have passed (deadline.go).
func (e *Endpoint) deliver(ctx context.Context, msgs []*kafka.Message) []error {
	fences := make([]fence, len(msgs))
	for i, m := range msgs {
		fences[i] = fenceOf(ctx, m)
	}
	states := statesOf(ctx, e.cfg.KeyState, msgs)
	attempts := e.attempts.first(msgs)
	backoff := e.cfg.Backoff
	waiting, answered := false, false
	defer func() {
		if waiting {
			e.trouble.leave(answered)
		}
	}()
	var send call
	for {
		if send == nil {
			var err error
			if send, err = e.transport.prepare(e.cfg.MemberID, msgs, attempts, fences, states); err != nil {
				return consumer.FailAll(len(msgs), fmt.Errorf("deliver: encoding the request: %w", err))
			}
		}
		deadline := e.deadline()
		r := e.send(ctx, send, deadline)
		if r.results != nil {
			answered = true
			applyChanges(states, r.changes, r.results)
			e.attempts.settle(msgs, attempts, r.results)
			e.metrics.countRecords(r.results)
			return r.results
		}
		if ctx.Err() != nil {
			return e.stopped(ctx, msgs, attempts)
		}
		if !waiting {
			waiting = true
			e.trouble.enter(r.err)
		} else {
			e.trouble.note(r.err)
		}
		wait := r.wait
		if wait == 0 {
			wait = backoff/2 + rand.N(backoff/2+1)
			backoff = min(2*backoff, e.cfg.MaxBackoff)
		}
		if r.inDoubt && !deadline.IsZero() {
			wait = max(wait, time.Until(deadline.Add(DeadlineGrace)))
		}
		if !sleep(ctx, wait) {
			return e.stopped(ctx, msgs, attempts)
		}
		if !e.cfg.giveUpAtTimeout {
			send = nil // the next request is the next attempt
			for i := range attempts {
				attempts[i]++
			}
		}
	}
}

// stopped ends a handler call whose context ended (the member stopped
// working on the records: their range drained, dropped or given back).
// The attempts sent are kept as failed ones, not forgotten: if this
// member sends a record again (its range came back, or it was fetched
// again), that request is the next attempt, which an endpoint can order
// after one of these still running.
func (e *Endpoint) stopped(ctx context.Context, msgs []*kafka.Message, attempts []int) []error {
	res := consumer.FailAll(len(msgs), ctx.Err())
	e.attempts.settle(msgs, attempts, res)
	return res
}

// sleep waits d, or until ctx ends: false then.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// send makes one request and counts it by outcome; a request cancelled
// because parent ended is not counted.
func (e *Endpoint) send(parent context.Context, send call, deadline time.Time) reply {
	ctx := parent
	if e.cfg.giveUpAtTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(parent, e.cfg.Timeout)
		defer cancel()
	}
	start := time.Now()
	r := send(ctx, deadline)
	o := outcomeDone
	switch {
	case r.results == nil && parent.Err() != nil:
		return r // cancelled: neither the endpoint's answer nor its trouble
	case r.results == nil:
		o = outcomeTrouble
		if ctx.Err() != nil || (!deadline.IsZero() && r.inDoubt && time.Now().After(deadline)) {
			r.err = fmt.Errorf("no answer by the request's deadline (the timeout is %s)", e.cfg.Timeout)
		}
	case r.refused:
		o = outcomeRefused
	}
	e.metrics.observe(o, time.Since(start))
	return r
}

// tlsURL reports whether raw (a checked URL) is https:// or grpcs://.
func tlsURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (strings.EqualFold(u.Scheme, "https") || strings.EqualFold(u.Scheme, "grpcs"))
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
