package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/keyshare/keyshare/consumer/internal/keyops"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// An operator's operations on one key (keyshare key skip; coord.KeyOp),
// as the member that owns the key's hash applies them.
//
// A skip names the key's head record. At the record's next attempt its
// owner writes it to the dead-letter topic with a cause naming the
// operator (or drops it, when the skip says so) instead of calling the
// handler, and counts it done; the key's later records then run. The skip
// is deleted once that completion is in etcd (the flush after it), so a
// member that dies in between leaves it for the range's next owner, who
// applies it again to the same record (a second dead letter at most) or,
// finding the record done in the ledger, deletes it. A skip whose record
// the key has passed is deleted and logged, never applied to another
// record.

// hasKeyOps reports whether the group has any key operation (a skip or a
// park) the member could apply: without one, a record costs no lookup
// and no KeyOp copied (a few percent of a handled record's time).
func (p *pipeline) hasKeyOps() bool { return p != nil && p.sess != nil && p.sess.HasKeyOps() }

// keyOpsFirst applies the operations of j's key before attempt of its
// handler call (spent: the attempts counted so far): a park copies the
// record instead, a park ended or an unpark or replay lets the key's
// earlier records go first, and a skip takes the record's place. settled
// reports that the operation was the record's handling, or that it must
// stop (err): the handler is not called.
func (p *pipeline) keyOpsFirst(ctx context.Context, j *job, attempt int, spent attemptCount) (settled bool, err error) {
	if p.hasKeyOps() {
		if op, ok := p.parkFor(j); ok {
			if attempt == 1 {
				// Parked (park.go): the copy is the record's handling,
				// written behind the key's earlier copies; its parker
				// finishes the record once the copy is acknowledged.
				p.parkLater(j)
				return true, errParkQueued
			}
			// Parked after a failed attempt: copied here.
			if err := p.park(ctx, j, op); err != errParkChanged {
				return true, err
			}
		}
	}
	// Parked before, its park ended since: the key's records still queued
	// to be parked, or on their way, go first (parker.go).
	if err := p.waitParkedCopies(ctx, j.key); err != nil {
		return true, err
	}
	// Unparked or replayed: those records run first (prelude.go).
	if err := p.preludeFirst(ctx, j.tp(), j.m.Key, j.o); err != nil {
		return true, err
	}
	if p.hasKeyOps() {
		if op, ok := p.skipFor(ctx, j); ok {
			return true, p.skip(ctx, j, op, int(spent))
		}
	}
	return false, nil
}

// skipFor returns the skip stored for j's record, if there is one it may
// apply now. It deletes a skip of an offset the key has passed, and marks
// refused a skip it cannot apply (no dead-letter topic, not dropped).
func (p *pipeline) skipFor(ctx context.Context, j *job) (coord.KeyOp, bool) {
	if p == nil || p.sess == nil || j.key.null {
		return coord.KeyOp{}, false
	}
	op, ok := p.sess.KeyOp(j.key.topic, j.key.partition, j.m.Key)
	if !ok {
		return coord.KeyOp{}, false
	}
	switch keyops.DecideSkip(op.Record, j.o, p.c.dlq != nil) {
	case keyops.SkipNone:
		return coord.KeyOp{}, false
	case keyops.SkipPassed:
		p.mu.Lock()
		applied := p.skipQueuedLocked(op)
		p.mu.Unlock()
		if !applied { // else: applied here, deleted after the flush that records it
			p.dropPassedSkip(ctx, op, fmt.Sprintf("the key is at offset %d", j.o))
		}
		return coord.KeyOp{}, false
	case keyops.SkipRefused:
		why := keyops.NoDeadLetterTopic
		p.log.Error("cannot skip the record as asked: "+why, "topic", j.key.topic, "partition", j.key.partition, "offset", j.o, "key", textsafe.Bytes(j.m.Key))
		rctx, cancel := context.WithTimeout(ctx, p.c.cfg.EtcdTimeout)
		defer cancel()
		if err := p.sess.RefuseKeyOp(rctx, op, why); err != nil {
			p.log.Warn("record the refusal of a skip", "error", err)
		}
		return coord.KeyOp{}, false
	}
	return op, true
}

// skip applies op to j's record instead of the handler: a dead letter
// whose cause names the operator, or nothing with op.Record.Drop. It
// returns nil when the record is done, ctx's error if the member must stop
// working on it.
func (p *pipeline) skip(ctx context.Context, j *job, op coord.KeyOp, attempts int) error {
	r := op.Record
	if !r.Drop {
		if err := p.c.deadLetters.Write(ctx, j.m, skippedError(keyops.SkipCause(r)), attempts); err != nil {
			return err
		}
		p.c.metrics.deadLettered.Add(1)
	}
	p.log.Warn("record skipped by an operator", "topic", j.key.topic, "partition", j.key.partition, "offset", j.o,
		"key", textsafe.Bytes(j.m.Key), "dropped", r.Drop, "by", textsafe.Escape(r.By), "reason", textsafe.Escape(r.Reason))
	p.mu.Lock()
	j.notesLocked().skip = &op // finish queues its deletion with the record's completion
	p.mu.Unlock()
	return nil
}

// skippedError is the cause a skipped record's dead letter carries.
type skippedError string

func (e skippedError) Error() string { return string(e) }

// dropPassedSkip deletes a skip whose record the key has passed.
func (p *pipeline) dropPassedSkip(ctx context.Context, op coord.KeyOp, where string) {
	dctx, cancel := context.WithTimeout(ctx, p.c.cfg.EtcdTimeout)
	defer cancel()
	deleted, err := p.sess.DeleteKeyOp(dctx, op)
	if err != nil {
		p.log.Warn("delete a skip the key has passed", "error", err)
		return
	}
	if deleted {
		r := op.Record
		p.log.Warn("a skip of a record the key has already passed was deleted, not applied: "+where, "topic", r.Topic, "partition", r.Partition,
			"offset", r.Offset, "key", textsafe.Bytes(r.Key), "by", textsafe.Escape(r.By))
	}
}

// takeSkipsLocked takes the skips whose records' completions the flush
// about to run writes.
func (p *pipeline) takeSkipsLocked() []coord.KeyOp {
	s := p.mu.skipsDone
	p.mu.skipsDone, p.mu.skipsDeleting = nil, s
	return s
}

// flushedSkipsLocked returns the skips of skips, taken by a flush that
// has returned, whose records' completions are in etcd: written reports
// that the flush wrote their range's state. A skip on a range it did not
// write (fenced, refused) waits for the next flush; one on a range this
// member no longer owns is left in etcd for the range's next owner, who
// finds its record done (watchKeyOps) or applies it again.
func (p *pipeline) flushedSkipsLocked(skips []coord.KeyOp, written func(*owned) bool) []coord.KeyOp {
	var done []coord.KeyOp
	for _, op := range skips {
		r := op.Record
		for _, w := range p.mu.byTP[tp{Topic: r.Topic, Partition: r.Partition}] {
			if !w.st.Range().Contains(uint32(r.Hash)) {
				continue
			}
			if written(w) {
				done = append(done, op)
			} else {
				p.mu.skipsDone = append(p.mu.skipsDone, op)
			}
		}
	}
	p.mu.skipsDeleting = done
	return done
}

// deleteSkips deletes skips applied and flushed. A skip written again
// meanwhile (another version) stays.
func (p *pipeline) deleteSkips(ctx context.Context, ops []coord.KeyOp) {
	for _, op := range ops {
		if _, err := p.sess.DeleteKeyOp(ctx, op); err != nil {
			p.log.Warn("delete a skip applied; the range's owner deletes it later", "error", err)
		}
	}
	p.mu.Lock()
	p.mu.skipsDeleting = nil
	p.mu.Unlock()
}

// watchKeyOps starts the preludes of unparked keys this member owns
// (prelude.go), and deletes the skips of records this member's ranges count as
// handled in etcd: applied by an owner that died before deleting them, or
// passed by a key with no later record to meet them. It looks when the
// operations change and every second.
func (p *pipeline) watchKeyOps() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		case <-p.sess.KeyOpsChanged():
		}
		var passed []coord.KeyOp
		p.mu.Lock()
		ops := p.sess.KeyOps()
		p.forgetWrittenLocked(ops)
		for _, op := range ops {
			r := op.Record
			if r.Op == schema.KeyOpUnpark || r.Op == schema.KeyOpReplay {
				p.startPreludeLocked(op)
				continue
			}
			if r.Op != schema.KeyOpSkip {
				continue
			}
			t := tp{Topic: r.Topic, Partition: r.Partition}
			if p.skipQueuedLocked(op) {
				continue
			}
			for _, w := range p.mu.byTP[t] {
				if w.revoking || !w.st.Range().Contains(uint32(r.Hash)) {
					continue
				}
				// Below the watermark in etcd, or done in an entry all in
				// etcd: its completion outlives this member.
				if r.Offset < max(w.acquiredWM, w.flushedWM) || w.inEtcd() && doneIn(w.st.Entry(), r.Offset, uint32(r.Hash)) {
					passed = append(passed, op)
				}
			}
		}
		p.mu.Unlock()
		for _, op := range passed {
			p.dropPassedSkip(p.ctx, op, "the ledger counts the record handled")
		}
	}
}

// forgetWrittenLocked drops this member's last write revisions
// (keyOpWritten, prelude.go) of the operations the watch no longer holds,
// held being what it holds: once the watch has brought an operation's
// deletion, no older copy of it can come, so none is left to tell apart
// (a later operation of the key comes at a later revision). Without it
// the map would keep an entry for every operation the member ever ran.
func (p *pipeline) forgetWrittenLocked(held []coord.KeyOp) {
	if len(p.mu.keyOpWritten) == 0 {
		return
	}
	names := make(map[string]bool, len(held))
	for _, op := range held {
		names[op.Name] = true
	}
	for name := range p.mu.keyOpWritten {
		if !names[name] {
			delete(p.mu.keyOpWritten, name)
		}
	}
}

// skipQueuedLocked reports whether op was applied here and waits for its
// flush, or for its deletion after it.
func (p *pipeline) skipQueuedLocked(op coord.KeyOp) bool {
	for _, s := range append(p.mu.skipsDone, p.mu.skipsDeleting...) {
		if s.Name == op.Name {
			return true
		}
	}
	return false
}

// doneIn reports whether e counts the record at o with hash h handled.
func doneIn(e ledger.Entry, o int64, h uint32) bool {
	for _, s := range e.Segments {
		if s.Range().Contains(h) {
			return s.Done(o, h)
		}
	}
	return false
}

// sleepOrKeyOp waits d, or less if the group's key operations change
// meanwhile: a record retrying meets an operator's skip at once.
func (p *pipeline) sleepOrKeyOp(ctx context.Context, d time.Duration) {
	if p == nil || p.sess == nil {
		sleep(ctx, d)
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-p.sess.KeyOpsChanged():
	}
}
