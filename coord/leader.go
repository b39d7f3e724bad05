package coord

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// leader is this member's leadership, valid while the context given with it
// lasts. Every write it makes is guarded by the election key's create
// revision, so a deposed leader cannot write (the guard etcd's
// Election.Proclaim uses).
//
// A leader holds the leader's work in one place: the election result, the
// assignment rounds (assignLoop) and, with Config.Offsets, the commit
// rounds (runCommits). Both read the group from one watch-fed cache of
// etcd, so a round costs no etcd read.
type leader struct {
	s     *Session
	key   string
	rev   int64
	cache *groupCache
}

// guard holds only while this member leads.
func (l *leader) guard() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)
}

// campaign runs for the session's life: campaign, lead until deposed,
// campaign again; it stops when the member leaves.
func (s *Session) campaign() {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	go func() {
		select {
		case <-s.leaving:
			cancel()
		case <-ctx.Done():
		}
	}()
	for ctx.Err() == nil {
		e := s.newElection()
		if err := e.Campaign(ctx, s.ID()); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("campaign for leadership", "error", err)
				sleep(ctx, time.Second)
			}
			continue
		}
		// etcd can return from Campaign after the lease expired
		// (etcd-io/etcd#19597): lead only if the key is still there and
		// ours.
		resp, err := s.cli.Get(ctx, e.Key())
		if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != e.Rev() {
			s.log.Warn("won an election whose key is gone; campaigning again", "key", e.Key(), "error", err)
			continue
		}
		l := &leader{s: s, key: e.Key(), rev: e.Rev(), cache: newGroupCache(s.cli, s.schema, s.log.Named("cache"))}
		s.lead(ctx, l)
		rctx, rcancel := context.WithTimeout(s.ctx, 2*time.Second)
		if err := e.Resign(rctx); err != nil && s.ctx.Err() == nil {
			s.log.Debug("resign", "error", err)
		}
		rcancel()
	}
}

// lead runs the leader's work until ctx ends or leadership is lost.
func (s *Session) lead(ctx context.Context, l *leader) {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.setLeader(true)
	defer s.setLeader(false)
	s.log.Info("became leader", "key", l.key)

	// Leadership ends if the election key goes (lease revoked, key deleted).
	go func() {
		wch := s.cli.Watch(clientv3.WithRequireLeader(lctx), l.key, clientv3.WithRev(l.rev))
		for wr := range wch {
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					s.log.Warn("election key deleted; stepping down")
					cancel()
					return
				}
			}
			if wr.Err() != nil {
				break
			}
		}
		cancel() // watch ended: we cannot tell, so step down and campaign again
	}()

	cacheDone := make(chan struct{})
	go func() {
		defer close(cacheDone)
		l.cache.run(lctx)
	}()
	defer func() { <-cacheDone }()

	var wg sync.WaitGroup
	if s.cfg.Offsets != nil {
		wg.Go(func() { l.runCommits(lctx) })
	}
	err := l.assignLoop(lctx)
	cancel()
	wg.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		s.log.Warn("stopped leading", "error", err)
	} else {
		s.log.Info("stopped leading")
	}
}

func (s *Session) setLeader(v bool) {
	s.mu.Lock()
	s.mu.leader = v
	s.mu.Unlock()
}

// assignLoop keeps the assignment in step with members and partitions. A
// round reads the group from the cache (no etcd request) and writes only
// the changes the plan finds; the cache pokes it when a member or range key
// changes (ledger flushes do not).
func (l *leader) assignLoop(ctx context.Context) error {
	s := l.s
	trigger := l.cache.assign
	poke := l.cache.pokeAssign
	tick := time.NewTicker(min(time.Second, s.cfg.DrainTimeout/4+time.Millisecond))
	defer tick.Stop()
	// Load is judged on its own timer (loadbalancer.go), not on reports.
	var loadTick <-chan time.Time
	if s.cfg.Balance == BalanceLoad {
		t := time.NewTicker(s.cfg.LoadReportInterval)
		defer t.Stop()
		loadTick = t.C
	}
	balance := newLoadBalancer(s.cfg, s.log.Named("load"), &s.loadMoves)

	// Partition counts and topic ids, read off the loop (topicread.go).
	rctx, rcancel := context.WithCancel(ctx)
	reader := s.startTopicReader(rctx, poke)
	defer func() {
		rcancel()
		<-reader.done
	}()

	r := newAssignRound(s.cfg, s.schema, balance)
	poke()
	for {
		judgeLoad := false
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		case <-loadTick:
			judgeLoad = true
		case <-trigger:
			// Let a burst of joins (or of registrations gone) settle
			// into one assignment.
			if r.debounce(l.cache.memberRevision()) {
				if err := sleep(ctx, s.cfg.RebalanceDebounce); err != nil {
					return err
				}
			}
		}
		if err := l.round(ctx, r, reader, judgeLoad); err != nil {
			return err
		}
	}
}

// round plans one assignment round on the latest partition counts and the
// cached group, and writes the changes it finds.
func (l *leader) round(ctx context.Context, r *assignRound, reader *topicReader, judgeLoad bool) error {
	s := l.s
	read := reader.latest()
	ts := r.takeRead(read)
	if !ts.ready {
		return nil
	}
	if ts.check {
		s.checkTopics(ctx, l, r.topics, read.ids, read.at)
	}
	// Reported once per change of the set of missing topics.
	if ts.missingChanged {
		s.reportMissingTopics(ts.missing)
	}
	assignRev := l.cache.assignRevision()
	quiet := r.quiet(assignRev)
	if quiet && !judgeLoad {
		return nil
	}
	snap, err := l.cache.snapshot(ctx)
	if err != nil {
		return err
	}
	st := r.step(snap, time.Now(), assignRev, judgeLoad, quiet) // monotonic now
	l.reportStep(st)
	if len(st.changes) == 0 {
		return nil
	}
	if st.more {
		s.log.Info("large assignment change; writing it over several rounds", "changes", st.planned, "this_round", len(st.changes))
		l.cache.pokeAssign()
	}
	retry, rev, err := s.apply(ctx, l, snap.Generation.Generation+1, st.changes)
	if err != nil {
		return err
	}
	if rev > 0 {
		// Plan the next round on a cache that holds this round's
		// writes, or its compares would fail on stale revisions.
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if !l.cache.waitRev(wctx, rev) && ctx.Err() == nil {
			s.log.Warn("the leader's cache has not seen its own assignment write yet; planning on it anyway", "revision", rev)
		}
		cancel()
	}
	if retry {
		l.cache.pokeAssign()
	}
	return nil
}

// reportMissingTopics logs the topics missing from the partition counts
// (missing, comma-separated), or that none is missing any more.
func (s *Session) reportMissingTopics(missing string) {
	if missing != "" {
		s.log.Error("topics missing from the partition counts (deleted, not created yet, or not authorised for Describe); their ranges are left as they are, the other topics are assigned: create the topics, grant access, or remove them from Config.Topics",
			"topics", fmt.Sprintf("[%s]", missing))
	} else {
		s.log.Info("every topic has partition counts again")
	}
}

// reportStep logs a round's damaged values and failovers, and schedules
// the rounds it asks for later.
func (l *leader) reportStep(st assignStep) {
	s := l.s
	if st.problems != "" {
		s.log.Error("damaged values in etcd; repairing what can be repaired", "problems", st.problems)
	}
	for _, g := range st.gone {
		s.log.Warn(fmt.Sprintf("member %s's session ended; failing over %d %s", g.id, g.ranges, plural(g.ranges, "range", "ranges")),
			"gone_member", g.id, "ranges", g.ranges, "after", s.cfg.FailoverGrace)
	}
	for _, w := range st.wake {
		time.AfterFunc(w, l.cache.pokeAssign)
	}
}

// drainGrace is how long past a revoking range's drain budget the leader
// waits before handing it on: time for the revoke to reach the owner, which
// starts its own drain clock when it sees it. A member that cannot hear
// from etcd for longer than its session TTL loses its session and stops
// all work (self-fencing), so max(1s, SessionTTL) covers any owner still
// working on the range.
func drainGrace(ttl time.Duration) time.Duration {
	return max(time.Second, ttl)
}

// plural is one if n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func joinErrors(errs []error) string {
	var b strings.Builder
	for i, e := range errs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// maxChangesPerRound bounds one assignment round: a larger plan (thousands
// of new partitions at once) is written over several rounds, each planned
// afresh from what the previous one wrote. It is large enough for a leave
// at P = 4,096 with two members (2,048 revokes, then 2,048 handoffs) to
// take one round each: every extra round waits for the cache to catch up.
const maxChangesPerRound = 4096
