package consumer

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/ledger"
)

// reconcile moves the pipeline to assignment a: new ranges start from their
// ledger state, ranges whose hash space stays keep their in-memory state
// (clipped if the leader split them), revoked ranges start draining, and
// ranges no longer owned are dropped with their in-flight work cancelled.
//
// An assignment read at an older etcd revision than the one applied last is
// ignored: the watch's update and a resync's snapshot can arrive in either
// order, and the older one would undo what the newer one applied.
func (p *pipeline) reconcile(a coord.Assignment) error {
	p.mu.Lock()
	applied := p.mu.rev
	p.mu.Unlock()
	if a.Rev < applied {
		p.log.Debug("ignoring an assignment older than the one applied", "rev", a.Rev, "applied_rev", applied, "generation", a.Generation)
		return nil
	}
	// Resolve start offsets of ranges without ledger state before taking
	// the lock: it may ask etcd and Kafka.
	starts := make(map[tp]int64)
	for _, r := range a.Ranges {
		if r.Entry.Initialized() {
			continue
		}
		if _, ok := starts[r.TP()]; ok {
			continue
		}
		s, err := p.c.startOffset(p.ctx, p.sess, r.TP())
		if err != nil {
			if p.ctx.Err() != nil {
				return nil
			}
			p.log.Error("cannot find where a new range starts; will retry", "topic", r.Record.Topic, "partition", r.Record.Partition, "error", err)
			p.retryLater()
			continue
		}
		starts[r.TP()] = s
	}

	p.mu.Lock()
	p.mu.gen, p.mu.rev = a.Generation, a.Rev
	old := p.mu.ranges
	next := make(map[string]*owned, len(a.Ranges))
	seek := make(map[tp]bool)
	for _, r := range a.Ranges {
		t := r.TP()
		src := p.containing(old, t, r.Record.Range())
		var w *owned
		switch {
		case src != nil && src.rs.Record.Range() == r.Record.Range():
			w = src
		case src != nil:
			w = &owned{st: src.st.Clip(r.Record.Range()), flushed: 0, revoking: src.revoking}
			for _, l := range src.losses { // not reported yet: the part reports its share
				if c, ok := l.Loss.Clip(r.Record.Range()); ok {
					w.losses = append(w.losses, coord.LossReport{Loss: c, At: l.At})
				}
			}
		default:
			start, ok := starts[t]
			if !r.Entry.Initialized() && !ok {
				continue // retried on resync
			}
			st, err := ledger.NewState(r.Record.Range(), r.Entry, start)
			if err != nil {
				p.log.Error("cannot load range state", "key", r.LedgerKey, "error", err)
				continue
			}
			w = &owned{st: st, dirty: !r.Entry.Initialized()}
			seek[t] = true
			p.log.Info("range acquired", "topic", t.Topic, "partition", t.Partition, "range", r.Record.Range().String(), "watermark", st.Watermark())
		}
		wasRevoking := w.revoking
		w.rs = r
		w.revoking = r.Record.State == coord.StateRevoking
		if wasRevoking && !w.revoking {
			seek[t] = true // it observed nothing while revoking: fetch again from its watermark
			if w.draining {
				// The leader took the revoke back: the drainer stops
				// (cond is broadcast below) and a later revoke starts a
				// new one.
				w.draining = false
				p.log.Info("revoke taken back; keeping the range", "topic", t.Topic, "partition", t.Partition, "range", r.Record.Range().String())
			}
		}
		if w.revoking && !w.draining {
			w.draining = true
			w.drains++
			p.log.Info("range revoked; draining", "topic", t.Topic, "partition", t.Partition, "range", r.Record.Range().String(), "to", r.Record.Target)
			seq, budget := w.drains, drainBudget(r.Record, p.c.cfg.DrainTimeout)
			p.goFunc(func() { p.drain(w, seq, time.Now(), budget) })
		}
		next[r.Key] = w
	}
	// Cancel in-flight work on hash space no longer owned.
	for _, w := range old {
		t := w.tp()
		for o, j := range p.mu.jobs[t] {
			if w.st.Range().Contains(j.h) && !ownsHash(next, t, j.h) {
				j.cancel()
				delete(p.mu.jobs[t], o)
				p.mu.inflight--
			}
		}
		if !ownsHash(next, t, uint32(w.st.Range().Lo)) {
			p.log.Info("range dropped", "topic", t.Topic, "partition", t.Partition, "range", w.st.Range().String())
		}
	}
	p.mu.ranges = next
	p.mu.byTP = make(map[tp][]*owned)
	for _, w := range next {
		p.mu.byTP[w.tp()] = append(p.mu.byTP[w.tp()], w)
	}
	for t := range p.mu.byTP {
		slices.SortFunc(p.mu.byTP[t], func(a, b *owned) int { return cmp.Compare(a.rs.Record.Lo, b.rs.Record.Lo) })
	}
	p.mu.cond.Broadcast()

	// Work out what the Kafka consumer must fetch.
	var assign, unassign, seeks []kafka.TopicPartition
	want := make(map[tp]int64)
	for t, ws := range p.mu.byTP {
		for _, w := range ws {
			if w.revoking {
				continue
			}
			wm := w.st.Watermark()
			if cur, ok := want[t]; !ok || wm < cur {
				want[t] = wm
			}
		}
	}
	for t, start := range want {
		topic := t.Topic
		ktp := kafka.TopicPartition{Topic: &topic, Partition: t.Partition, Offset: kafka.Offset(start)}
		switch {
		case !p.mu.assigned[t]:
			assign = append(assign, ktp)
			p.mu.assigned[t] = true
			p.mu.pos[t] = start
		case seek[t] && start < p.mu.pos[t]:
			seeks = append(seeks, ktp)
			p.mu.pos[t] = start
		}
	}
	for t := range p.mu.assigned {
		if _, ok := want[t]; !ok {
			topic := t.Topic
			unassign = append(unassign, kafka.TopicPartition{Topic: &topic, Partition: t.Partition})
			delete(p.mu.assigned, t)
			delete(p.mu.pos, t)
			delete(p.mu.halted, t)
		}
	}
	p.mu.Unlock()

	if len(unassign) > 0 {
		if err := p.kc.IncrementalUnassign(unassign); err != nil {
			return fmt.Errorf("consumer: unassign %v: %w", unassign, err)
		}
	}
	if len(assign) > 0 {
		if err := p.kc.IncrementalAssign(assign); err != nil {
			return fmt.Errorf("consumer: assign: %w", err)
		}
		p.syncPause(assign)
	}
	if len(seeks) > 0 {
		// SeekPartitions returns once no record fetched before the seek
		// can be delivered any more.
		res, err := p.kc.SeekPartitions(seeks)
		if err != nil {
			return fmt.Errorf("consumer: seek: %w", err)
		}
		// A partition librdkafka stopped (its offset was deleted, and the
		// error is still on its way to the fetch loop) refuses a seek.
		var refused []kafka.TopicPartition
		for _, r := range res {
			if r.Error != nil {
				p.log.Debug("seek refused; assigning the partition again", "topic", *r.Topic, "partition", r.Partition, "offset", r.Offset, "error", r.Error)
				refused = append(refused, kafka.TopicPartition{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset})
			}
		}
		if len(refused) > 0 {
			if err := p.reassign(refused); err != nil {
				return fmt.Errorf("consumer: restart partitions %v: %w", refused, err)
			}
		}
	}
	if len(assign)+len(unassign)+len(seeks) > 0 {
		p.log.Debug("fetch assignment changed", "assigned", len(assign), "unassigned", len(unassign), "seeks", len(seeks), "generation", a.Generation)
	}
	poke(p.flushCh)
	return nil
}

// retryLater asks for a fresh assignment read after a pause.
func (p *pipeline) retryLater() {
	p.goFunc(func() {
		sleep(p.ctx, time.Second)
		poke(p.resync)
	})
}
