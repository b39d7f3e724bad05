package coord

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// The member's conservative lease deadline (issue 20).
//
// etcd expires a lease on its own leader's clock, TTL after the last
// keepalive it processed; etcd's client ends its session on the client's
// clock, TTL after it *received* the last answer, and looks only every
// 500 ms. Between the two a member cut from etcd but not from Kafka can go
// on starting records of ranges the leader has already given to others.
//
// So the member keeps its own deadline, from what it knows for certain:
//
//  1. It reads its monotonic clock (sent) just before sending a keepalive.
//  2. etcd processes that keepalive after it was sent, and if it answers
//     with TTL t > 0 it has set the lease to expire t after processing it:
//     not before sent + t on a clock that runs at the member's rate. (etcd
//     only ever moves an expiry later: a new etcd leader extends every
//     lease by its election timeout; it never shortens one.)
//  3. keyshare's leader gives a member's ranges away only after it has seen
//     the member's registration deleted, which etcd does at or after the
//     expiry, and then only after FailoverGrace more on its own clock
//     (grace.go).
//  4. The member starts no record at or after sent + t − DeadlineMargin
//     (Live, checked just before each handler call), and ends its session
//     then (all owned work stops; it joins again with a new lease).
//
// Hence the old owner's last start < expiry − DeadlineMargin < the new
// owner's first start − FailoverGrace. DeadlineMargin absorbs a difference
// between the member's and etcd's clock rates (10 s × 100 ppm = 1 ms; the
// default, TTL/10, is far above) and the instant between the check and the
// handler's start. A handler already running at the deadline is cancelled
// through its context; one that ignores its context can overlap the new
// owner only if it runs longer than DeadlineMargin + FailoverGrace past
// the deadline (by default TTL/10 + 1 s), the bound the design gives.
//
// No answer ever moves the deadline back, and the argument needs no
// assumption on how long an answer takes to come back: a late answer only
// extends the deadline from the (earlier) time its request was sent.

// deadline is the conservative deadline, extended by answered keepalives.
type deadline struct {
	mu sync.Mutex
	at time.Time
}

func (d *deadline) get() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at
}

// extend moves the deadline to at if that is later.
func (d *deadline) extend(at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if at.After(d.at) {
		d.at = at
	}
}

// Deadline is when the member stops starting owned work unless a keepalive
// sent before then is answered: the time the last answered keepalive was
// sent, plus the TTL etcd answered, minus Config.DeadlineMargin.
func (s *Session) Deadline() time.Time { return s.dl.get() }

// Live reports whether the member may start owned work now (a record's
// handler): the session is not lost and its conservative deadline has not
// passed. It reads the clock, so it holds even when the goroutine that
// ends the session at the deadline runs late.
func (s *Session) Live() bool {
	return s.ctx.Err() == nil && time.Now().Before(s.dl.get())
}

// keepDeadline sends a keepalive every TTL/6 (etcd's own client sends every
// TTL/3), extends the deadline from each answered one, and ends the
// session at the deadline if none was answered in time. Keepalives do not
// wait for each other's answers: on a slow link (chaos row 16e: RTT 400 ms,
// stalls) one keepalive per round trip left gaps in which the deadline
// passed although etcd kept the lease.
func (s *Session) keepDeadline() {
	every := max(s.cfg.SessionTTL/6, 100*time.Millisecond)
	var wg sync.WaitGroup
	defer wg.Wait()
	gone := make(chan struct{}, 1) // etcd says the lease is gone
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		d := s.dl.get()
		if !time.Now().Before(d) {
			s.lost("lease deadline passed with no keepalive answered in time; session lost, stopping all owned work")
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.keepAliveOnce(gone)
		}()
		at := time.NewTimer(time.Until(d))
		select {
		case <-s.ctx.Done():
			at.Stop()
			return
		case <-gone:
			at.Stop()
			s.lost("etcd says the lease is gone; session lost, stopping all owned work")
			return
		case <-tick.C:
		case <-at.C:
		}
		at.Stop()
	}
}

// keepAliveOnce sends one keepalive and extends the deadline from its send
// time if etcd answers.
func (s *Session) keepAliveOnce(gone chan<- struct{}) {
	sent := time.Now()
	// An answer later than sent + TTL extends nothing.
	ctx, cancel := context.WithDeadline(s.ctx, sent.Add(s.cfg.SessionTTL))
	defer cancel()
	resp, err := s.cli.KeepAliveOnce(ctx, s.es.Lease())
	switch {
	case err == nil && resp.TTL > 0:
		s.dl.extend(sent.Add(time.Duration(resp.TTL)*time.Second - s.cfg.DeadlineMargin))
	case errors.Is(err, rpctypes.ErrLeaseNotFound), err == nil:
		select {
		case gone <- struct{}{}:
		default:
		}
	case s.ctx.Err() == nil:
		s.log.Debug("keepalive not answered", "error", err, "deadline_in", time.Until(s.dl.get()).Round(time.Millisecond))
	}
}

// lost ends the session as lost, saying why unless it was closed.
func (s *Session) lost(why string) {
	s.mu.Lock()
	closed := s.mu.closed
	s.mu.Unlock()
	if !closed && s.ctx.Err() == nil {
		s.log.Warn(why, "margin", s.cfg.DeadlineMargin)
	}
	s.cancel(ErrSessionLost)
}
