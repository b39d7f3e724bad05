package consumer

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/schema"
)

// The drain of a revoked range, and its release to the leader.

// drain finishes a revoked range: it waits until none of its records is in
// flight (or the drain budget is spent), then writes its final state and
// releases it to the leader. What is still in flight then is cancelled
// before the release is sent, not after it returns: once the release
// commits, the next owner may run the key, so by then a handler must have
// been told to stop, and a record waiting to retry must not try again.
// Those records run again on the next owner. The budget runs on this
// member's monotonic clock from received, when reconcile saw the revoke:
// the record's Since is the leader's wall clock and says nothing here. seq is the drain's number
// (w.drains when it started): if the leader takes the revoke back, or a
// later revoke started another drain, this one stops without releasing.
// A take-back that comes while the release is on its way waits for its
// answer (releaseOf); a release fenced because the leader moved on waits
// for the member's view to show how.
func (p *pipeline) drain(w *owned, seq int, received time.Time, budget time.Duration) {
	// The member's stop wakes every wait of the drain, its release's too.
	stop := context.AfterFunc(p.ctx, func() {
		p.mu.Lock()
		p.mu.cond.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	rel, ok := p.drainWait(w, seq, received, budget)
	if !ok {
		return
	}
	p.releaseDrained(w, seq, rel, received)
}

// drainCurrentLocked reports whether drain seq of w is still wanted.
func (p *pipeline) drainCurrentLocked(w *owned, seq int) bool {
	return p.ctx.Err() == nil && p.mu.ranges[w.rs.Key] == w && w.revoking && w.drains == seq
}

// drainWait waits until none of w's records is in flight or the budget
// from received is spent, cancels what is still in flight, and returns
// w's release; ok is false when the drain is no longer wanted.
func (p *pipeline) drainWait(w *owned, seq int, received time.Time, budget time.Duration) (rel coord.RangeRelease, ok bool) {
	deadline := received.Add(budget)
	timer := time.AfterFunc(time.Until(deadline), func() {
		p.mu.Lock()
		p.mu.cond.Broadcast()
		p.mu.Unlock()
	})
	defer timer.Stop()
	current := func() bool { return p.drainCurrentLocked(w, seq) }
	// A drain still waiting after a second says once what for, and for
	// how long at most: a stuck key or an endpoint that is down holds it
	// to its budget, and without a word the member looks hung.
	said := false
	sayAt := received.Add(time.Second)
	sayTimer := time.AfterFunc(time.Until(sayAt), func() {
		p.mu.Lock()
		p.mu.cond.Broadcast()
		p.mu.Unlock()
	})
	defer sayTimer.Stop()
	p.mu.Lock()
	for current() && p.inFlightLocked(w) > 0 && time.Now().Before(deadline) {
		if !said && !time.Now().Before(sayAt) {
			said = true
			p.logDrainWaitLocked(w, budget, deadline)
		}
		p.mu.cond.Wait()
	}
	if !current() {
		p.mu.Unlock()
		return rel, false
	}
	if n := p.abandonLocked(w); n > 0 {
		p.log.Warn("drain budget spent with records in flight; cancelled, they will run again on the next owner", "range", w.st.Range().String(), "in_flight", n, "budget", budget)
	}
	rel = releaseOf(w)
	p.mu.Unlock()
	return rel, true
}

// releaseDrained sends rel, drained w's release, until it is answered,
// and then drops w, or, fenced because the leader moved on, waits for the
// member's view to show how: taken back, given away, or revoked again,
// whose release it then sends.
func (p *pipeline) releaseDrained(w *owned, seq int, rel coord.RangeRelease, received time.Time) {
	current := func() bool { return p.drainCurrentLocked(w, seq) }
	for {
		// The drains of ranges revoked together (a leave, a scale-out)
		// finish together; coord batches their concurrent Release calls
		// into a few transactions, each range still fenced on its own.
		err := p.sess.ReleaseRanges(p.ctx, []coord.RangeRelease{rel})
		if err == nil {
			p.c.handoffSeconds.Observe(time.Since(received).Seconds())
			p.c.metrics.retentionLosses.Add(int64(len(rel.Losses)))
		}
		p.mu.Lock()
		var fenced *coord.FencedError
		switch {
		case err == nil || errors.As(err, &fenced) && fenced.Session:
			// Released; or the session is gone, and every range with it.
			w.releasing = false
			if err != nil {
				p.log.Warn("release fenced", "range", rel.Range.Key, "error", err)
			}
			p.mu.rangeTable.dropReleased(w)
			p.mu.Unlock()
			return
		case p.ctx.Err() != nil:
			// The member has stopped: leaving, it stops once its ranges
			// are handed over, which its view can see before this call
			// returns (a handoff plan, coord/handoff.go).
			p.mu.Unlock()
			return
		case fenced == nil:
			// No answer: the release may have been written all the same
			// (a timeout), so the range stays releasing and the same
			// release goes again (fenced, if the first one was written).
			p.mu.Unlock()
			p.log.Warn("release", "range", rel.Range.Key, "error", err)
			sleep(p.ctx, 200*time.Millisecond)
			continue
		}
		// Fenced: the leader rewrote the range record after the revoke
		// this drain answers. It took the revoke back, revoked the range
		// again, or gave it away; which one, the member's view shows once
		// it has the new record. Until then the range and its state stay
		// here: dropping them would lose the completions the release
		// carried, and a range taken back would load its older state from
		// etcd and run those records again. The assignment is read again
		// (at etcd's current revision, where the record differs) so that
		// the wait ends even if no update was coming.
		w.releasing = false
		poke(p.resync)
		for current() && w.rs.Rev == rel.Range.Rev {
			p.mu.cond.Wait()
		}
		p.log.Debug("release fenced", "range", rel.Range.Key, "error", err)
		if !current() {
			p.mu.Unlock() // given away, taken back, or the member stopping
			return
		}
		if w.rs.Record.State != schema.StateRevoking {
			// Taken back while the release was on its way: reconcile
			// kept the range revoking until now, and applies the
			// take-back to the assignment read again (or starts a new
			// drain if a revoke comes first).
			w.draining = false
			p.mu.Unlock()
			poke(p.resync)
			return
		}
		rel = releaseOf(w) // revoked again: release the range as it stands now
		p.mu.Unlock()
	}
}

// releaseOf is the release of revoking range w as the member holds it,
// marking w as releasing: until the release is answered no record of w may
// run, even if the leader takes the revoke back (reconcileTable), because
// the release carries w's state as of now and the next owner would run
// again what ran after it. The caller holds p.mu.
func releaseOf(w *owned) coord.RangeRelease {
	w.releasing = true
	return coord.RangeRelease{Range: w.rs, Final: w.st.Entry(), Losses: slices.Clone(w.losses), Written: w.inEtcd()}
}

// abandonLocked cancels the records of revoking range w still in flight
// (running, waiting to retry, or queued behind their key) and forgets them,
// so that their outcome is ignored (finish), cancels the preludes of its
// keys (prelude.go), and returns how many there were. It does not wait for a handler to return: one that ignores its
// context can still run beside the next owner (docs/consumer.md).
//
// Their offsets stay pending, given back to the ledger as not in flight
// (Shelve): if the leader takes the revoke back, the member fetches them
// again from the watermark and runs them. That changes no stored field:
// what etcd holds of w, if anything, still matches its state.
func (p *pipeline) abandonLocked(w *owned) int {
	t := w.tp()
	inEtcd := w.inEtcd()
	n := 0
	for run, h := range p.mu.preludes[t] {
		if w.st.Range().Contains(h) {
			run.cancel() // it ends, and stops counting, on its own goroutine
			n++
		}
	}
	for j := range p.mu.jobsOf(t) {
		if !w.st.Range().Contains(j.hash()) {
			continue
		}
		p.dropJobLocked(j)
		n++
		if err := w.st.Shelve(j.o, j.hash()); err != nil {
			p.log.Error("ledger refused to take back a cancelled record", "topic", t.Topic, "partition", t.Partition, "offset", j.o, "error", err)
		}
	}
	if n > 0 {
		if inEtcd {
			w.flushed = w.st.Version()
		}
		p.mu.cond.Broadcast()
		poke(p.space)
	}
	return n
}

// logDrainWaitLocked says what the drain of w waits for: its records in
// flight and preludes, by key, and the time left of its budget.
func (p *pipeline) logDrainWaitLocked(w *owned, budget time.Duration, deadline time.Time) {
	var keys []string
	for j := range p.mu.jobsOf(w.tp()) {
		if w.st.Range().Contains(j.hash()) && !j.key.null && !slices.Contains(keys, j.key.key) {
			keys = append(keys, j.key.key)
		}
	}
	p.log.Info("draining a revoked range: waiting for its records in flight, then releasing it", "range", w.st.Range().String(),
		"in_flight", p.inFlightLocked(w), "keys", textsafe.FirstFew(keys, ", ", func(k string) string { return textsafe.Bytes([]byte(k)) }),
		"budget", budget, "left", time.Until(deadline).Round(100*time.Millisecond))
}

// oldestLocked is when the oldest in-flight record of w was dispatched.
func (p *pipeline) oldestLocked(w *owned) time.Time {
	var oldest *job
	for j := range p.mu.jobsOf(w.tp()) {
		if w.st.Range().Contains(j.hash()) && (oldest == nil || j.queued < oldest.queued) {
			oldest = j
		}
	}
	if oldest == nil {
		return time.Time{}
	}
	return oldest.since()
}

// inFlightLocked counts the records of w handed to workers and not finished.
func (p *pipeline) inFlightLocked(w *owned) int {
	n := 0
	for _, h := range p.mu.preludes[w.tp()] { // an unpark's or a replay's prelude (prelude.go)
		if w.st.Range().Contains(h) {
			n++
		}
	}
	for j := range p.mu.jobsOf(w.tp()) {
		if w.st.Range().Contains(j.hash()) {
			n++
		}
	}
	return n
}
