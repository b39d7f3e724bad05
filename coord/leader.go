package coord

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Leader is this member's leadership, valid while the context given with it
// lasts. Every write it makes is guarded by the election key's create
// revision, so a deposed leader cannot write (the guard etcd's
// Election.Proclaim uses).
type Leader struct {
	s   *Session
	key string
	rev int64
}

// Guard holds only while this member leads.
func (l *Leader) Guard() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)
}

// Snapshot reads the group's state.
func (l *Leader) Snapshot(ctx context.Context) (*Snapshot, error) {
	return ReadSnapshot(ctx, l.s.cli, l.s.group())
}

// RecordCommit stores offset as the partition's committed offset, guarded by
// leadership and by the stored value being what the caller last read (prev,
// 0 when there was none), so that the stored offset never goes backwards. The
// consumer records before committing to Kafka, and reads both on takeover.
// It fails with ErrNotLeader when the writer no longer leads, and with
// ErrCommitConflict when the stored commit is not the one at prevRev.
func (l *Leader) RecordCommit(ctx context.Context, tp TopicPartition, prevRev, offset int64) (int64, error) {
	key := l.s.schema.Commit(tp.Topic, tp.Partition)
	rec := CommitRecord{V: recordVersion, Offset: offset, Leader: l.s.ID(), At: time.Now().UTC()}
	resp, err := l.s.cli.Txn(ctx).
		If(l.Guard(), clientv3.Compare(clientv3.ModRevision(key), "=", prevRev)).
		Then(clientv3.OpPut(key, mustJSON(rec))).
		Else(clientv3.OpTxn([]clientv3.Cmp{l.Guard()}, nil, nil)). // which compare failed
		Commit()
	if err != nil {
		return 0, fmt.Errorf("coord: record commit of %s/%d at %d: %w", tp.Topic, tp.Partition, offset, err)
	}
	if !resp.Succeeded {
		if len(resp.Responses) == 1 && resp.Responses[0].GetResponseTxn().GetSucceeded() {
			return 0, fmt.Errorf("coord: record commit of %s/%d at %d: %w", tp.Topic, tp.Partition, offset, ErrCommitConflict)
		}
		return 0, fmt.Errorf("coord: record commit of %s/%d: %w", tp.Topic, tp.Partition, ErrNotLeader)
	}
	return resp.Header.Revision, nil
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
		e := concurrency.NewElection(s.es, s.schema.Election())
		if err := e.Campaign(ctx, s.ID()); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("campaign for leadership", "error", err)
				sleep(ctx, time.Second)
			}
			continue
		}
		// etcd can return from Campaign after the lease expired (etcd
		// issue 19597): lead only if the key is still there and ours.
		resp, err := s.cli.Get(ctx, e.Key())
		if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != e.Rev() {
			s.log.Warn("won an election whose key is gone; campaigning again", "key", e.Key(), "error", err)
			continue
		}
		l := &Leader{s: s, key: e.Key(), rev: e.Rev()}
		s.lead(ctx, l)
		rctx, rcancel := context.WithTimeout(s.ctx, 2*time.Second)
		if err := e.Resign(rctx); err != nil && s.ctx.Err() == nil {
			s.log.Debug("resign", "error", err)
		}
		rcancel()
	}
}

// lead runs the leader's work until ctx ends or leadership is lost.
func (s *Session) lead(ctx context.Context, l *Leader) {
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

	done := make(chan struct{})
	if s.cfg.OnLeader != nil {
		go func() {
			defer close(done)
			s.cfg.OnLeader(lctx, l)
		}()
	} else {
		close(done)
	}
	err := s.assignLoop(lctx, l)
	cancel()
	<-done
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

// assignLoop keeps the assignment in step with members and partitions.
func (s *Session) assignLoop(ctx context.Context, l *Leader) error {
	trigger := make(chan struct{}, 1)
	poke := func() {
		select {
		case trigger <- struct{}{}:
		default:
		}
	}
	for _, prefix := range []string{s.schema.Members(), s.schema.Ranges()} {
		wch := s.cli.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix())
		go func() {
			for wr := range wch {
				if wr.Err() != nil {
					return
				}
				poke()
			}
		}()
	}
	tick := time.NewTicker(min(time.Second, s.cfg.DrainTimeout/4+time.Millisecond))
	defer tick.Stop()

	var (
		parts    []PartitionWeight
		partsAt  time.Time
		partsOK  bool
		missing  string // topics the last read could not count, joined
		problems string
		// When this leader first saw each revoking record, on its own
		// clock: a new leader starts counting drains again.
		seen = make(map[rangeObs]time.Time)
		// Topics deleted and created again (topics.go).
		topics = &topicWatch{resetAt: make(map[string]time.Time), held: make(map[string]bool)}
		gone   goneTracker // FailoverGrace (grace.go)
	)
	poke()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		case <-trigger:
			// Let a burst of joins settle into one assignment.
			if err := sleep(ctx, s.cfg.Debounce); err != nil {
				return err
			}
		}
		if !partsOK || time.Since(partsAt) > s.cfg.PartitionRefresh {
			p, gone, err := s.readPartitions(ctx)
			if err != nil {
				s.log.Error("read partition counts; assignment not updated", "error", err)
				continue
			}
			parts, partsAt, partsOK = p, time.Now(), true
			s.checkTopics(ctx, l, topics)
			// Report once per change of the set of missing topics.
			if m := strings.Join(gone, ","); m != missing {
				if m != "" {
					s.log.Error("topics missing from the partition counts (deleted, not created yet, or not authorised for Describe); their ranges are left as they are, the other topics are assigned: create the topics, grant access, or remove them from Config.Topics",
						"topics", fmt.Sprintf("[%s]", m))
				} else {
					s.log.Info("every topic has partition counts again")
				}
				missing = m
			}
		} else if len(topics.held) > 0 {
			s.checkTopics(ctx, l, topics) // a reset under way: every round
		}
		snap, err := ReadSnapshot(ctx, s.cli, s.group())
		if err != nil {
			s.log.Warn("read group state", "error", err)
			continue
		}
		if p := joinErrors(snap.Problems); p != problems {
			if p != "" {
				s.log.Error("damaged values in etcd; repairing what can be repaired", "problems", p)
			}
			problems = p
		}
		clock := time.Now() // monotonic; .UTC() below drops that reading
		observe(seen, snap, clock)
		held, wait := gone.held(snap, clock, s.cfg.FailoverGrace)
		if wait > 0 {
			time.AfterFunc(wait, poke)
		}
		changes := plan(planInput{
			schema: s.schema, snap: snap, parts: topics.assignable(parts), now: clock.UTC(),
			drainTimeout: s.cfg.DrainTimeout, gen: snap.Generation.Generation + 1,
			maxTxnOps: s.cfg.MaxTxnOps,
			clock:     clock, seen: seen, grace: drainGrace(s.cfg.SessionTTL), held: held,
		})
		if len(changes) == 0 {
			continue
		}
		retry, err := s.apply(ctx, l, snap.Generation.Generation+1, changes)
		if err != nil {
			return err
		}
		if retry {
			poke()
		}
	}
}

// observe notes the first time each revoking record of snap is seen and
// forgets records that changed or are gone.
func observe(seen map[rangeObs]time.Time, snap *Snapshot, now time.Time) {
	current := make(map[rangeObs]bool)
	for _, r := range snap.Ranges {
		if r.Record.State == StateRevoking {
			o := rangeObs{r.Key, r.Rev}
			current[o] = true
			if _, ok := seen[o]; !ok {
				seen[o] = now
			}
		}
	}
	for o := range seen {
		if !current[o] {
			delete(seen, o)
		}
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

// readPartitions returns the partitions of the topics whose counts could be
// read, and the topics whose could not (missing from the source's answer, or
// with no partitions). The leader plans only the partitions it read: the
// ranges of a missing topic are neither reassigned nor deleted on the basis
// of a failed read, and one missing topic does not hold back the others.
func (s *Session) readPartitions(ctx context.Context) (parts []PartitionWeight, missing []string, err error) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	counts, err := s.cfg.Partitions(rctx, s.cfg.Topics)
	if err != nil {
		return nil, nil, err
	}
	var out []PartitionWeight
	for _, t := range s.cfg.Topics {
		n, ok := counts[t]
		if !ok || n <= 0 {
			missing = append(missing, t)
			continue
		}
		for p := range n {
			out = append(out, PartitionWeight{TopicPartition: TopicPartition{Topic: t, Partition: p}})
		}
	}
	slices.SortFunc(out, func(a, b PartitionWeight) int { return compareTP(a.TopicPartition, b.TopicPartition) })
	slices.Sort(missing)
	return out, slices.Compact(missing), nil
}

// apply writes the changes in as few transactions as etcd's limits allow,
// each guarded by leadership. A change whose compares fail (an owner wrote
// meanwhile) is left for the next round: retry says so.
func (s *Session) apply(ctx context.Context, l *Leader, gen int64, changes []change) (retry bool, err error) {
	genOp := clientv3.OpPut(s.schema.Generation(), mustJSON(GenerationRecord{V: recordVersion, Generation: gen, Leader: s.ID(), At: time.Now().UTC()}))
	limit := s.cfg.MaxTxnOps
	for len(changes) > 0 {
		n, cmps, ops := 0, 1, 1
		for n < len(changes) {
			c := changes[n]
			if n > 0 && (cmps+len(c.cmps) > limit || ops+len(c.ops) > limit) {
				break
			}
			cmps, ops = cmps+len(c.cmps), ops+len(c.ops)
			n++
		}
		batch := changes[:n]
		changes = changes[n:]
		ok, err := s.applyBatch(ctx, l, genOp, gen, batch)
		if err != nil || ok {
			if err != nil && !errors.Is(err, ErrNotLeader) {
				// etcd unreachable, or a transaction it refused (a
				// change over its limits would be refused every
				// round): say which, then read again next round.
				if ctx.Err() != nil {
					return false, ctx.Err()
				}
				s.log.Warn("assignment not written; trying again next round", "generation", gen, "error", err, "changes", whats(batch))
				return true, nil
			}
			if err != nil {
				return false, err
			}
			continue
		}
		// Some owner wrote meanwhile; try each change alone so that one
		// conflict does not hold back the rest.
		retry = true
		for _, c := range batch {
			if len(batch) == 1 {
				break
			}
			if _, err := s.applyBatch(ctx, l, genOp, gen, []change{c}); errors.Is(err, ErrNotLeader) {
				return false, err
			} else if err != nil {
				s.log.Warn("assignment change not written; trying again next round", "generation", gen, "error", err, "change", c.what)
			}
		}
	}
	return retry, nil
}

// whats describes a batch of changes for a log line: the first few, and how
// many more.
func whats(batch []change) string {
	var b strings.Builder
	for i, c := range batch {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(batch)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(c.what)
	}
	return b.String()
}

// applyBatch writes changes in one transaction. It returns false if a compare
// failed while this member still leads, and ErrNotLeader if it does not.
func (s *Session) applyBatch(ctx context.Context, l *Leader, genOp clientv3.Op, gen int64, batch []change) (bool, error) {
	cmps, ops := []clientv3.Cmp{l.Guard()}, []clientv3.Op{genOp}
	for _, c := range batch {
		cmps, ops = append(cmps, c.cmps...), append(ops, c.ops...)
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return false, err
	}
	if resp.Succeeded {
		for _, c := range batch {
			s.log.Info("assignment", "generation", gen, "change", c.what)
		}
		return true, nil
	}
	lr, err := s.cli.Txn(ctx).If(l.Guard()).Commit()
	if err != nil {
		return false, err
	}
	if !lr.Succeeded {
		return false, ErrNotLeader
	}
	return false, nil
}
