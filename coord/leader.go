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
	return ReadSnapshot(ctx, l.s.cli, l.s.schema)
}

// RecordCommit stores offset as the partition's committed offset, guarded by
// leadership and by the stored value being what the caller last read (prev,
// 0 when there was none), so that the stored offset never goes backwards. The
// consumer records before committing to Kafka, and reads both on takeover.
func (l *Leader) RecordCommit(ctx context.Context, tp TopicPartition, prevRev, offset int64) (int64, error) {
	key := l.s.schema.Commit(tp.Topic, tp.Partition)
	rec := CommitRecord{V: recordVersion, Offset: offset, Leader: l.s.ID(), At: time.Now().UTC()}
	resp, err := l.s.cli.Txn(ctx).
		If(l.Guard(), clientv3.Compare(clientv3.ModRevision(key), "=", prevRev)).
		Then(clientv3.OpPut(key, mustJSON(rec))).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("coord: record commit of %s/%d at %d: %w", tp.Topic, tp.Partition, offset, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("coord: record commit of %s/%d: %w (or the stored commit changed)", tp.Topic, tp.Partition, ErrNotLeader)
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
		problems string
		gone     goneTracker // FailoverGrace (grace.go)
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
		if parts == nil || time.Since(partsAt) > s.cfg.PartitionRefresh {
			p, err := s.readPartitions(ctx)
			if err != nil {
				s.log.Error("read partition counts; assignment not updated", "error", err)
				continue
			}
			parts, partsAt = p, time.Now()
		}
		snap, err := ReadSnapshot(ctx, s.cli, s.schema)
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
		held, wait := gone.held(snap, time.Now(), s.cfg.FailoverGrace)
		if wait > 0 {
			time.AfterFunc(wait, poke)
		}
		changes, _ := plan(planInput{
			schema: s.schema, snap: snap, parts: parts, now: time.Now().UTC(),
			drainTimeout: s.cfg.DrainTimeout, gen: snap.Generation.Generation + 1, held: held,
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

func (s *Session) readPartitions(ctx context.Context) ([]PartitionWeight, error) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	counts, err := s.cfg.Partitions(rctx, s.cfg.Topics)
	if err != nil {
		return nil, err
	}
	var out []PartitionWeight
	for _, t := range s.cfg.Topics {
		n, ok := counts[t]
		if !ok || n <= 0 {
			return nil, fmt.Errorf("coord: topic %q has no partitions (does it exist?)", t)
		}
		for p := range n {
			out = append(out, PartitionWeight{TopicPartition: TopicPartition{Topic: t, Partition: p}})
		}
	}
	slices.SortFunc(out, func(a, b PartitionWeight) int { return compareTP(a.TopicPartition, b.TopicPartition) })
	return out, nil
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
				return true, nil // transient: the next round reads again
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
			}
		}
	}
	return retry, nil
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
