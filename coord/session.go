package coord

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/schema"
)

// Session is one member's membership in a group for the life of one etcd
// session (lease). Everything only an owner or the leader may do derives from
// Ctx(), which ends the moment the session is lost; the member must then drop
// all its work and Join again.
type Session struct {
	cli       *clientv3.Client
	cfg       Config
	schema    schema.Keys
	log       hclog.Logger
	es        *concurrency.Session
	memberKey string
	memberRev int64
	info      schema.MemberInfo
	rec       *recorder
	view      *assignmentView // the member's assignment, watch-fed (assignview.go)
	ttl       time.Duration   // granted by etcd
	dl        deadline        // conservative lease deadline (deadline.go)
	loadMoves loadCounter     // the leader's load-driven moves (loadbalancer.go)

	ctx     context.Context
	cancel  context.CancelCauseFunc
	leaving chan struct{} // closed by Leave: stop campaigning
	updates chan schema.Assignment
	pauses  chan PauseState
	keyOps  *keyOpsView // the group's key operations, watch-fed (keyops.go)
	// releases carries ReleaseRanges calls to writeReleases (release.go).
	releases chan *releaseRequest
	// handoffReady is closed when the leader's first handoff plan for
	// this leaving member arrives (handoff.go).
	handoffReady chan struct{}
	wg           sync.WaitGroup

	mu struct {
		sync.Mutex
		leader    bool
		leaveOnce bool
		closed    bool
		// leavingAt is when the leaving write succeeded; handoff is the
		// leader's plan for this member's ranges as last read.
		leavingAt   time.Time
		handoff     storedHandoff
		handoffSeen bool
	}
}

// Join opens an etcd session, registers the member under its lease and
// starts campaigning for leadership and watching the assignment. It fails
// within cfg.StartTimeout if etcd cannot be reached, with ErrMemberExists
// if a live member has the same id, and with a *TopicsDifferError if a live
// member consumes other topics; nothing is written in any of these cases.
func Join(ctx context.Context, cli *clientv3.Client, cfg Config) (*Session, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Session{
		cli:      cli,
		cfg:      cfg,
		schema:   schema.Group{Prefix: cfg.Prefix, Name: cfg.Group}.Keys(),
		log:      cfg.Logger.Named("coord").With("member", cfg.MemberID),
		leaving:  make(chan struct{}),
		updates:  make(chan schema.Assignment, 1),
		pauses:   make(chan PauseState, 1),
		keyOps:   newKeyOpsView(),
		releases: make(chan *releaseRequest),
		rec:      newRecorder(cli, cfg.MaxTxnOps),

		handoffReady: make(chan struct{}),
	}
	s.memberKey = s.schema.Member(cfg.MemberID)
	s.view = newAssignmentView(cli, s.schema, cfg.MemberID, cfg.MaxTxnOps, s.log, s.publish)

	sctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	ttl := int64(cfg.SessionTTL.Round(time.Second) / time.Second)
	granted := time.Now() // before the request: see deadline.go
	lease, err := cli.Grant(sctx, ttl)
	if err != nil {
		return nil, fmt.Errorf("coord: cannot open an etcd session within %s (endpoints %v): %w; check that etcd is running and reachable", cfg.StartTimeout, cli.Endpoints(), err)
	}
	// The session's keepalives run until Close; they must not end with ctx.
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	es, err := concurrency.NewSession(cli, concurrency.WithLease(lease.ID), concurrency.WithContext(s.ctx))
	if err != nil {
		s.cancel(err)
		return nil, fmt.Errorf("coord: start etcd session: %w", err)
	}
	s.es = es
	host, _ := os.Hostname()
	s.info = schema.MemberInfo{V: recordVersion, ID: cfg.MemberID, Host: host, PID: os.Getpid(), Started: time.Now().UTC(), Weight: cfg.Weight}
	rev, err := s.register(sctx, lease.ID)
	if err != nil {
		s.closeSession()
		s.cancel(err)
		return nil, err
	}
	s.memberRev = rev
	s.ttl = time.Duration(lease.TTL) * time.Second
	s.dl.extend(granted.Add(time.Duration(lease.TTL)*time.Second - cfg.DeadlineMargin))
	s.log.Info("joined group", "group", cfg.Group, "ttl_s", lease.TTL, "lease", fmt.Sprintf("%x", lease.ID))

	s.goFunc(func() {
		select {
		case <-es.Done():
			s.mu.Lock()
			closed := s.mu.closed
			s.mu.Unlock()
			if !closed {
				s.log.Warn("etcd session lost; stopping all owned work")
			}
			s.cancel(ErrSessionLost)
		case <-s.ctx.Done():
		}
	})
	s.goFunc(s.keepDeadline)
	s.goFunc(s.writeReleases)
	s.goFunc(func() { s.view.run(s.ctx) })
	s.goFunc(s.watchPause)
	s.goFunc(s.watchKeyOps)
	s.goFunc(s.campaign)
	return s, nil
}

// register writes the member's registration and its topics under its
// lease, once its topics agree with every live member's (subscription.go),
// and returns the revision of the write. The write is guarded by no other
// member's topics having changed since they were compared; when one has, it
// compares again.
func (s *Session) register(ctx context.Context, lease clientv3.LeaseID) (int64, error) {
	topics := topicSet(s.cfg.Topics)
	sub := schema.SubscriptionRecord{V: recordVersion, Topics: topics}
	for {
		readRev, err := s.checkSubscriptions(ctx, topics)
		if err != nil {
			return 0, err
		}
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(s.memberKey), "=", 0),
				clientv3.Compare(clientv3.ModRevision(s.schema.Subscriptions()), "<", readRev+1).WithPrefix()).
			Then(clientv3.OpPut(s.memberKey, mustJSON(s.info), clientv3.WithLease(lease)),
				clientv3.OpPut(s.schema.Subscription(s.ID()), mustJSON(sub), clientv3.WithLease(lease))).
			Else(clientv3.OpGet(s.memberKey, clientv3.WithKeysOnly())).
			Commit()
		switch {
		case err != nil:
			return 0, fmt.Errorf("coord: register member: %w", err)
		case resp.Succeeded:
			return resp.Header.Revision, nil
		case len(resp.Responses[0].GetResponseRange().Kvs) > 0:
			return 0, fmt.Errorf("coord: register member: %w: %q (at %s); choose another member id or wait for the other member's session (TTL %s) to end", ErrMemberExists, s.ID(), s.memberKey, s.cfg.SessionTTL)
		}
		// Another member's topics were written since they were read.
	}
}

// goFunc runs fn in a goroutine that Close waits for.
func (s *Session) goFunc(fn func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		fn()
	}()
}

// ID is the member id.
func (s *Session) ID() string { return s.cfg.MemberID }

// Ctx ends when the session is lost or closed; context.Cause says which. It
// ends at the latest shortly after Deadline; use Live to decide, at the
// instant it matters, whether to start owned work.
func (s *Session) Ctx() context.Context { return s.ctx }

// TTL is the lease TTL etcd granted.
func (s *Session) TTL() time.Duration { return s.ttl }

// IsLeader reports whether this member currently leads the group.
func (s *Session) IsLeader() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.leader
}

// Leaving reports whether Leave has been called: from then on every range
// the member owns is shown as revoking, and an assignment that shows one
// active was read before the leave.
func (s *Session) Leaving() bool {
	select {
	case <-s.leaving:
		return true
	default:
		return false
	}
}

// Updates delivers the member's assignment each time the ranges change. Only
// the latest is kept: a slow reader skips to the newest.
func (s *Session) Updates() <-chan schema.Assignment { return s.updates }

// SetStuck reports that range r is held by a stuck record (see
// StuckRecord). The report lives under the member's lease, so it disappears
// with the member.
func (s *Session) SetStuck(ctx context.Context, r schema.RangeState, rec schema.StuckRecord) error {
	rec.V, rec.Member = recordVersion, s.ID()
	rec.Topic, rec.Partition, rec.Lo = r.Record.Topic, r.Record.Partition, r.Record.Lo
	key := s.schema.StuckRange(rec.Topic, rec.Partition, rec.Lo)
	_, err := s.cli.Txn(ctx).If(s.common()...).Then(clientv3.OpPut(key, mustJSON(rec), clientv3.WithLease(s.es.Lease()))).Commit()
	return err
}

// ClearStuck removes the stuck report of range r.
func (s *Session) ClearStuck(ctx context.Context, r schema.RangeState) error {
	_, err := s.cli.Delete(ctx, s.schema.StuckRange(r.Record.Topic, r.Record.Partition, r.Record.Lo))
	return err
}

// ReadAssignment returns the member's assignment as of now. Updates
// delivers it on every change; this is for a member that must read it again
// (after a fenced write, say). It costs one small read: the current
// revision, which the watch-fed view then catches up to.
func (s *Session) ReadAssignment(ctx context.Context) (schema.Assignment, error) {
	a, err := s.viewNow(ctx)
	if err == nil || ctx.Err() != nil {
		return a, err
	}
	// The view is behind (a watch being restarted): read the group.
	snap, err := ReadSnapshot(ctx, s.cli, s.group())
	if err != nil {
		return schema.Assignment{}, err
	}
	return snap.AssignmentOf(s.ID()), nil
}

// viewNow returns the view's assignment once it holds etcd's current
// revision, waiting at most 2 s for it.
func (s *Session) viewNow(ctx context.Context) (schema.Assignment, error) {
	resp, err := s.cli.Get(ctx, s.memberKey, clientv3.WithKeysOnly())
	if err != nil {
		return schema.Assignment{}, fmt.Errorf("coord: read the current revision: %w", err)
	}
	// Ask etcd to tell the watches that they are current, so that the
	// view reaches this revision even when no range changed since.
	_ = s.cli.RequestProgress(clientv3.WithRequireLeader(ctx))
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return s.view.current(wctx, resp.Header.Revision)
}

// RecordedCommits reads the offsets the leader recorded in etcd for parts
// (the last ones it committed to Kafka), in one etcd transaction per 64
// partitions. A partition with no record, or an unreadable one (reported
// in bad), is left out.
func (s *Session) RecordedCommits(ctx context.Context, parts []assign.TopicPartition) (recs map[assign.TopicPartition]schema.CommitRecord, bad map[assign.TopicPartition]error, err error) {
	recs, bad = make(map[assign.TopicPartition]schema.CommitRecord, len(parts)), make(map[assign.TopicPartition]error)
	const per = 64
	for i := 0; i < len(parts); i += per {
		batch := parts[i:min(i+per, len(parts))]
		ops := make([]clientv3.Op, len(batch))
		for j, p := range batch {
			ops[j] = clientv3.OpGet(s.schema.Commit(p.Topic, p.Partition))
		}
		resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, nil, fmt.Errorf("coord: read recorded commits: %w", err)
		}
		for j, p := range batch {
			kvs := resp.Responses[j].GetResponseRange().Kvs
			if len(kvs) != 1 {
				continue
			}
			if rec, err := schema.DecodeCommit(string(kvs[0].Key), kvs[0].Value, kvs[0].ModRevision); err != nil {
				bad[p] = err
			} else {
				recs[p] = rec
			}
		}
	}
	return recs, bad, nil
}

// publish hands the member's assignment to Updates, replacing one not yet
// read.
func (s *Session) publish(a schema.Assignment) {
	select {
	case <-s.updates:
	default:
	}
	s.updates <- a
}

// Leave starts a graceful exit: the member is marked leaving, with its
// DrainTimeout in leaving/<id> (LeaveRecord), and stops campaigning (a
// leader resigns). From then on Updates shows every range the member owns
// as revoking, with that budget: the member drains its ranges without
// waiting for the leader to revoke them, and its releases write each range
// the leader's handoff plan names straight to its next owner (one write
// per range); the leader hands on the rest as they are released.
// The caller keeps serving Updates — draining and releasing revoked ranges
// — until WaitReleased returns, then calls Close.
func (s *Session) Leave(ctx context.Context) error {
	s.mu.Lock()
	if s.mu.leaveOnce {
		s.mu.Unlock()
		return nil
	}
	s.mu.leaveOnce = true
	s.mu.Unlock()
	close(s.leaving)
	info := s.info
	info.Leaving = true
	leave := schema.LeaveRecord{V: recordVersion, DrainMs: s.cfg.DrainTimeout.Milliseconds()}
	resp, err := s.cli.Txn(ctx).If(s.common()...).Then(
		clientv3.OpPut(s.memberKey, mustJSON(info), clientv3.WithLease(s.es.Lease())),
		clientv3.OpPut(s.schema.Leaving(s.ID()), mustJSON(leave), clientv3.WithLease(s.es.Lease())),
	).Commit()
	if err != nil {
		return fmt.Errorf("coord: mark member leaving: %w", err)
	}
	if !resp.Succeeded {
		return ErrSessionLost
	}
	s.mu.Lock()
	s.mu.leavingAt = time.Now()
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.followHandoff()
	}()
	s.log.Info("leaving group; draining and releasing every range")
	if s.view != nil {
		s.view.leave(s.cfg.DrainTimeout)
	}
	return nil
}

// WaitReleased returns once the member owns no range, or when no other member
// remains to take its ranges (then the caller flushes its state and leaves;
// the ranges resume from that state when a member joins). It follows the
// watch-fed view.
//
// Before it returns it brings the view to etcd's current revision (one
// small read) and looks again: a leader that planned on a snapshot from
// before the leave may have given the member a range the view has not seen
// yet, and a member that left with it would turn that range's handoff into
// a failover, held back by FailoverGrace.
func (s *Session) WaitReleased(ctx context.Context) error {
	for {
		if err := s.view.released(ctx); err != nil {
			return err
		}
		if _, err := s.viewNow(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.log.Debug("could not bring the assignment view to the current revision before leaving; looking again", "error", err)
			if err := sleep(ctx, 100*time.Millisecond); err != nil {
				return err
			}
			continue
		}
		if s.view.isReleased() {
			return nil
		}
	}
}

// Close ends the session: goroutines stop, the lease is revoked and the
// registration disappears. It is idempotent.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.closed = true
	s.mu.Unlock()
	s.closeSession()
	s.cancel(context.Canceled)
	s.wg.Wait()
	return nil
}

// closeSession revokes the lease (bounded in time: etcd may be gone).
func (s *Session) closeSession() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := s.cli.Revoke(ctx, s.es.Lease()); err != nil && s.ctx.Err() == nil {
		s.log.Debug("revoke lease", "error", err)
	}
	s.es.Orphan()
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
