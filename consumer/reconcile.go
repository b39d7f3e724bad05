package consumer

import (
	"time"

	"github.com/keyshare/keyshare/schema"
)

// Moving to a new assignment.
//
// Whatever an assignment takes away — a revoke, a range dropped, work to
// cancel — is applied the moment the fetch loop reads it, with no I/O
// before it. The leader hands a revoked range on after its drain budget
// plus max(1 s, TTL), counting on an owner that hears etcd to start its
// drain at once. A fetch loop that first read start offsets from etcd and
// Kafka (up to StartTimeout each, longer while a group coordinator loads)
// would go on starting the range's records while the next owner runs
// them. So the fetch loop does no I/O of its own: the reads a new range
// may need (its start offset, startoffsets.go), an assignment read again
// (rereadLoop) and retention's log offsets (retention.go) run in
// goroutines, and the fetch loop applies their answers when they come.

// startsAnswer is what a start-offset read found.
type startsAnswer struct {
	starts  map[tp]int64
	errs    map[tp]error // partitions to try again
	refused error        // a refusal no retry fixes: it ends Run
}

// reconcile moves the pipeline to assignment a at once: ranges whose hash
// space stays keep their in-memory state (clipped if the leader split
// them), revoked ranges start draining, ranges no longer owned are dropped
// with their in-flight work cancelled, and new ranges with a ledger entry
// start from it. A new range without one waits for its start offset, read
// in the background (readStarts); the fetch loop adds it when the answer
// comes (startsRead).
//
// An assignment read at an older etcd revision than the one applied last is
// ignored, but for a newer generation: the watch's update and a reread can
// arrive in either order, and the older one would undo what the newer one
// applied.
func (p *pipeline) reconcile(a schema.Assignment) error {
	need, err := p.apply(a, nil)
	if err != nil {
		return err
	}
	p.readStarts(need)
	return nil
}

// apply moves the pipeline to assignment a, starting new ranges without
// ledger state from starts where it has their partition's offset. It does
// no I/O but the fetcher's (librdkafka's local assign and seek), and
// returns the partitions of the new ranges left out for want of a start
// offset.
func (p *pipeline) apply(a schema.Assignment, starts map[tp]int64) ([]tp, error) {
	p.mu.Lock()
	if a.Rev < p.mu.rev {
		// Its ranges are older than those applied, but not always its
		// generation: the view publishes a generation as it sees it, with
		// the revision its ranges are current through, which can trail a
		// snapshot read meanwhile (coord.Session.ReadAssignment). The
		// generation is the newest seen, for the status and its metric.
		p.mu.gen = max(p.mu.gen, a.Generation)
		applied := p.mu.rev
		p.mu.Unlock()
		p.log.Debug("ignoring an assignment older than the one applied", "rev", a.Rev, "applied_rev", applied, "generation", a.Generation)
		return nil, nil
	}
	received := time.Now()
	p.mu.gen, p.mu.rev = max(p.mu.gen, a.Generation), a.Rev
	p.latest = a
	p.mu.leaving = p.sess != nil && p.sess.Leaving()
	res := reconcileTable(&p.mu.rangeTable, p.mu.jobs, a, starts, p.c.cfg.DrainTimeout, p.log)
	for _, j := range res.cancel {
		if p.mu.isInFlight(j) {
			p.dropJobLocked(j)
		}
	}
	// A key's prelude (prelude.go) on hash space no longer owned ends as
	// its records do: a range given away without a revoke has no drain to
	// end it, and its new owner runs the key's operation from its last
	// progress.
	for t, runs := range p.mu.preludes {
		for run, h := range runs {
			if !ownsHash(p.mu.byTP, t, h) {
				run.cancel()
			}
		}
	}
	for _, d := range res.drains {
		p.goFunc(func() { p.drain(d.w, d.seq, received, d.budget) })
	}
	for _, po := range res.fetch.unassign {
		delete(p.mu.halted, po.tp)
	}
	p.mu.cond.Broadcast()
	p.mu.Unlock()

	if err := p.applyFetch(res.fetch, a.Generation); err != nil {
		return nil, err
	}
	poke(p.flushCh)
	return res.needStart, nil
}

// readStarts reads the start offsets of partitions need in a goroutine
// (all at once, startoffsets.go); the answer comes to the fetch loop on
// p.startsCh. While a read runs no other starts: when it ends, the fetch
// loop asks for what the latest assignment still needs (startsRead).
func (p *pipeline) readStarts(need []tp) {
	if len(need) == 0 || p.readingStarts {
		return
	}
	p.readingStarts = true
	p.goFunc(func() {
		starts, errs, refused := p.c.startOffsets(p.ctx, p.sess, need)
		select {
		case p.startsCh <- startsAnswer{starts: starts, errs: errs, refused: refused}:
		case <-p.ctx.Done():
		}
	})
}

// startsRead applies the latest assignment again with the start offsets
// ans found, which adds the new ranges they were read for (those the
// assignment still lists). Partitions whose offset could not be read are
// tried again after a pause; ranges assigned since the read began are
// read for at once.
func (p *pipeline) startsRead(ans startsAnswer) error {
	p.readingStarts = false
	if ans.refused != nil {
		return ans.refused
	}
	if len(ans.errs) > 0 && p.ctx.Err() != nil {
		return nil // startOffsets logs the trouble, once a minute
	}
	need, err := p.apply(p.latest, ans.starts)
	if err != nil {
		return err
	}
	if len(ans.errs) > 0 {
		p.retryLater()
		return nil
	}
	p.readStarts(need)
	return nil
}

// retryLater asks for a fresh assignment read after a pause.
func (p *pipeline) retryLater() {
	p.goFunc(func() {
		sleep(p.ctx, time.Second)
		poke(p.resync)
	})
}

// applyReread applies assignment a, read again by rereadLoop, if it is
// newer than the one applied last; else it applies that one again.
//
// The watch's updates come in the order the view published them, but a
// reread comes on its own channel, and can arrive after updates published
// later at the same revision: the view publishes a release the member has
// just made (and a new generation) at the revision it already had, until
// its watch brings the release. Such a reread can still list the released
// range as revoking, with the ledger entry read before its drain; applied
// after the release's update, it would take the range up again from that
// entry, and a hand-back would then run again what the release recorded
// as done. The latest assignment applied again still does what the reread
// was asked for: the start offsets it needs are read again (retryLater),
// and a drain waiting on a fenced write is woken.
func (p *pipeline) applyReread(a schema.Assignment) error {
	p.mu.Lock()
	stale := a.Rev <= p.mu.rev
	if stale {
		p.mu.gen = max(p.mu.gen, a.Generation)
	}
	p.mu.Unlock()
	if stale {
		a = p.latest
	}
	return p.reconcile(a)
}

// rereadLoop reads the member's assignment again whenever something asks
// (p.resync: a fenced flush, a start offset to read again) and hands it
// to the fetch loop on p.reread. The read waits for etcd (up to 2 s for
// the watch-fed view to catch up, coord.Session.ReadAssignment), which the
// fetch loop must not. Asks that come during a read are answered by one
// more read.
func (p *pipeline) rereadLoop() {
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.resync:
		}
		a, err := p.sess.ReadAssignment(p.ctx)
		for err != nil {
			if p.ctx.Err() != nil {
				return
			}
			p.log.Warn("reread assignment", "error", err)
			sleep(p.ctx, 200*time.Millisecond)
			a, err = p.sess.ReadAssignment(p.ctx)
		}
		select {
		case p.reread <- a:
		case <-p.ctx.Done():
			return
		}
	}
}
