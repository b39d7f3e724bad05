package consumer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Retrying the calls a member makes to Kafka and etcd.
//
// A broker that is starting (or restarting, or moving a coordinator) and
// an etcd that is electing a leader answer with errors for a while; a
// member started then, or running through it, retries with backoff for
// as long as it runs, reports not ready (/readyz) meanwhile, and logs each
// distinct problem once a minute. An error no retry can fix ends Run:
// kafkaDefinitive (kafkaerrors.go), the etcd refusals etcdTransient does
// not list, and errors the caller marks final.

// problemLogInterval is how often one problem is logged while it lasts.
const problemLogInterval = time.Minute

// Backoff between attempts: from retryMin, doubling, up to retryMax, each
// wait drawn from [d/2, d] so that members started together spread out.
const (
	retryMin = 100 * time.Millisecond
	retryMax = 5 * time.Second
)

// finalError marks an error a retry cannot fix (a missing topic, a plain
// consumer group that is live): retry returns it at once.
type finalError struct{ err error }

func (e *finalError) Error() string { return e.err.Error() }
func (e *finalError) Unwrap() error { return e.err }

// final marks err as one a retry cannot fix.
func final(err error) error { return &finalError{err} }

// retriable reports whether a retry may fix err.
func retriable(err error) bool {
	var fe *finalError
	return !errors.As(err, &fe) && !kafkaDefinitive(err)
}

// retry calls f until it succeeds, returns an error no retry can fix, or
// ctx ends; then it returns nil, that error, or context.Cause(ctx). Each
// attempt gets StartTimeout. While attempts fail, what is a problem of
// the member's (problems).
func (c *Consumer) retry(ctx context.Context, what string, f func(ctx context.Context) error) error {
	wait := retryMin
	for {
		actx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
		err := f(actx)
		cancel()
		switch {
		case ctx.Err() != nil:
			c.problems.resolve(what, nil)
			return context.Cause(ctx)
		case err == nil:
			c.problems.resolve(what, c.memberLog())
			return nil
		case !retriable(err):
			c.problems.resolve(what, nil)
			return err
		}
		c.problems.report(c.memberLog(), what, err)
		sleep(ctx, wait/2+rand.N(wait/2+1))
		wait = min(2*wait, retryMax)
	}
}

// memberLog is the log of the member's problems, which name the member as
// the pipeline's lines do (a process may run several members).
func (c *Consumer) memberLog() hclog.Logger { return c.log.With("member", c.cfg.MemberID) }

// problems are the calls a member is retrying now, and when each distinct
// problem was last logged.
type problems struct {
	mu      sync.Mutex
	current map[string]problem   // by what is being retried
	logged  map[string]time.Time // by what and the problem's identity
}

type problem struct {
	err      error
	since    time.Time
	attempts int
}

// report records that what failed with err, and logs it unless the same
// problem was logged within problemLogInterval.
func (ps *problems) report(log interface {
	Warn(string, ...any)
}, what string, err error, args ...any) {
	key := what + "\x00" + problemIdentity(err)
	now := time.Now()
	ps.mu.Lock()
	if ps.current == nil {
		ps.current, ps.logged = make(map[string]problem), make(map[string]time.Time)
	}
	p := ps.current[what]
	if p.attempts == 0 {
		p.since = now
	}
	p.err = err
	p.attempts++
	ps.current[what] = p
	last, seen := ps.logged[key]
	logIt := !seen || now.Sub(last) >= problemLogInterval
	if logIt {
		ps.logged[key] = now
	}
	ps.mu.Unlock()
	if logIt {
		args = append([]any{"error", err, "failing_for", now.Sub(p.since).Round(time.Millisecond), "attempts", p.attempts}, args...)
		log.Warn(fmt.Sprintf("cannot %s yet; retrying (logged once a minute while it lasts)", what), args...)
	}
}

// resolve records that what no longer fails; if it was failing and log is
// not nil, it says so.
func (ps *problems) resolve(what string, log interface{ Info(string, ...any) }) {
	ps.mu.Lock()
	p, was := ps.current[what]
	delete(ps.current, what)
	for key := range ps.logged {
		if strings.HasPrefix(key, what+"\x00") {
			delete(ps.logged, key)
		}
	}
	ps.mu.Unlock()
	if was && log != nil {
		log.Info(fmt.Sprintf("%s: done after %d failed attempts", what, p.attempts), "failing_for", time.Since(p.since).Round(time.Millisecond))
	}
}

// String describes the current problems ("" if none), for /readyz.
func (ps *problems) String() string {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []string
	for what, p := range ps.current {
		out = append(out, fmt.Sprintf("cannot %s (for %s, %d attempts): %v", what, time.Since(p.since).Round(time.Second), p.attempts, p.err))
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// problemIdentity is what makes two failures the same problem: no answer
// in time (whether librdkafka or the attempt's context gave up first), a
// Kafka error's code (its text carries timings), or the text of any other.
func problemIdentity(err error) string {
	var ke kafka.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer in time"
	case errors.As(err, &ke) && (ke.Code() == kafka.ErrTimedOut || ke.Code() == kafka.ErrTimedOutQueue):
		return "no answer in time"
	case errors.As(err, &ke):
		return fmt.Sprintf("kafka %d", int(ke.Code()))
	}
	return err.Error()
}

// etcdTransient reports whether an error from joining the group (coord.Join)
// is one an etcd cluster gives while it is unreachable, starting or
// electing a leader. Anything else (credentials, permissions, a member id
// in use, a bad configuration) ends Run as it did.
func etcdTransient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	for _, e := range []error{rpctypes.ErrNoLeader, rpctypes.ErrNotLeader, rpctypes.ErrLeaderChanged, rpctypes.ErrNotCapable, rpctypes.ErrStopped,
		rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost, rpctypes.ErrTimeoutWaitAppliedIndex,
		rpctypes.ErrTooManyRequests, rpctypes.ErrUnhealthy} {
		if errors.Is(err, e) {
			return true
		}
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted:
		return true
	}
	return false
}
