package consumer

import (
	"time"

	"github.com/keyshare/keyshare/coord"
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
	// Only this goroutine adds ranges to the table; drains only take
	// released ones out (and the table remembers those), so what is new
	// now is still new below.
	need := p.mu.rangeTable.startsNeeded(a)
	p.mu.Unlock()
	if a.Rev < applied {
		p.log.Debug("ignoring an assignment older than the one applied", "rev", a.Rev, "applied_rev", applied, "generation", a.Generation)
		return nil
	}
	// Resolve start offsets of new ranges without ledger state before
	// taking the lock again: it may ask etcd and Kafka. All partitions at
	// once (startoffsets.go).
	starts, startErrs := p.c.startOffsets(p.ctx, p.sess, need)
	if len(startErrs) > 0 {
		if p.ctx.Err() != nil {
			return nil
		}
		for t, err := range startErrs {
			p.log.Error("cannot find where a new range starts; will retry", "topic", t.Topic, "partition", t.Partition, "error", err, "partitions_failed", len(startErrs))
			break
		}
		p.retryLater()
	}

	p.mu.Lock()
	p.mu.gen, p.mu.rev = a.Generation, a.Rev
	res := reconcileTable(&p.mu.rangeTable, p.mu.jobs, a, starts, p.c.cfg.DrainTimeout, p.log)
	for _, j := range res.cancel {
		if p.mu.jobs[j.t][j.o] == j {
			j.cancel()
			delete(p.mu.jobs[j.t], j.o)
			p.mu.inflight--
		}
	}
	if res.unstarted > 0 && len(startErrs) == 0 {
		p.retryLater()
	}
	for _, d := range res.drains {
		p.goFunc(func() { p.drain(d.w, d.seq, time.Now(), d.budget) })
	}
	for _, po := range res.fetch.unassign {
		delete(p.mu.halted, po.tp)
	}
	p.mu.cond.Broadcast()
	p.mu.Unlock()

	if err := p.applyFetch(res.fetch, a.Generation); err != nil {
		return err
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
