package coord

import (
	"context"
	"errors"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// The member's conservative lease deadline.
//
// etcd expires a lease on its own leader's clock, TTL after the last
// keepalive it processed; etcd's client ends its session on the client's
// clock, TTL after it *received* the last answer, and looks only every
// 500 ms. Between the two a member cut from etcd but not from Kafka can go
// on starting records of ranges the leader has already given to others.
//
// So the member keeps its own deadline, from what it knows for certain:
//
//  1. It reads its monotonic clock (sent) just before sending a keepalive
//     on a keepalive stream of its own.
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
//
// A member asks before every record, so it reads only the monotonic clock:
// the deadline carries a monotonic reading (it is a time.Now plus the
// TTL), and time.Until then compares with that alone, where time.Now
// would read the wall clock too.
func (s *Session) Live() bool {
	return s.ctx.Err() == nil && time.Until(s.dl.get()) > 0
}

// keepDeadline keeps the deadline up to date for the session's life: one
// goroutine holds a keepalive stream of its own open (again and again if it
// breaks), and this one ends the session at the deadline, whatever the
// stream is doing (opening it waits for the connection).
func (s *Session) keepDeadline() {
	every := max(s.cfg.SessionTTL/6, 100*time.Millisecond)
	ctx, cancel := context.WithCancel(s.ctx)
	gone := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if s.keepStream(ctx, every) {
				close(gone)
				return
			}
			sleep(ctx, 100*time.Millisecond) // the stream broke: not in a tight loop
		}
	}()
	for {
		t := time.NewTimer(time.Until(s.dl.get()))
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-gone:
			t.Stop()
			s.lost("etcd says the lease is gone; session lost, stopping all owned work")
			return
		case <-t.C:
			if !time.Now().Before(s.dl.get()) {
				s.lost("lease deadline passed with no keepalive answered in time; session lost, stopping all owned work")
				return
			}
		}
	}
}

// errLeaseGone: etcd answered a keepalive with TTL 0.
var errLeaseGone = errors.New("lease gone")

// keepStream sends a keepalive every `every` on one LeaseKeepAlive stream
// (etcd's own client sends every TTL/3 on its own stream) and extends the
// deadline from each answer. etcd's server handles a keepalive stream one
// request at a time, answering in order, so the n-th answer belongs to the
// n-th request: its send time is known exactly. Requests do not wait for
// answers, so a slow link (chaos row 16e) leaves no gaps. A stream of its
// own, rather than a KeepAliveOnce per keepalive, because each new stream
// costs a round trip and the server's auth checks: with etcd auth and the
// race detector one took up to 1.4 s. It returns when the stream breaks or
// sctx ends (false), or when etcd says the lease is gone (true).
func (s *Session) keepStream(sctx context.Context, every time.Duration) (gone bool) {
	// Require a leader: an etcd member cut off from its peers ends the
	// stream instead of taking keepalives it cannot pass on.
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(sctx))
	defer cancel()
	// WaitForReady, as etcd's client does: after an outage the stream opens
	// the moment the connection is back, not at the next attempt.
	stream, err := pb.NewLeaseClient(s.cli.ActiveConnection()).LeaseKeepAlive(ctx, grpc.WaitForReady(true))
	if err != nil {
		s.log.Debug("open keepalive stream", "error", err)
		return false
	}
	sent := make(chan time.Time, 64) // send times of unanswered requests, in order
	recvErr := make(chan error, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // before wg.Wait: ends Recv
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			resp, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			var at time.Time
			select {
			case at = <-sent:
			case <-ctx.Done():
				return
			}
			if resp.TTL <= 0 {
				recvErr <- errLeaseGone
				return
			}
			s.dl.extend(at.Add(time.Duration(resp.TTL)*time.Second - s.cfg.DeadlineMargin))
		}
	}()
	tick := time.NewTicker(every)
	defer tick.Stop()
	lease := int64(s.es.Lease())
	for {
		select {
		case sent <- time.Now(): // read the clock before sending: see above
			if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: lease}); err != nil {
				s.log.Debug("send keepalive", "error", err)
				return false
			}
		default: // 64 unanswered: no point in more
		}
		select {
		case <-sctx.Done():
			return false
		case err := <-recvErr:
			if errors.Is(err, errLeaseGone) {
				return true
			}
			if sctx.Err() == nil {
				s.log.Debug("keepalive stream ended", "error", err, "deadline_in", time.Until(s.dl.get()).Round(time.Millisecond))
			}
			return false
		case <-tick.C:
		}
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
