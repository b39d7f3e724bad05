package consumer

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/ledger"
)

// Flushing the changed ledger entries to etcd.

// flushLoop writes changed ledger entries every flush interval, at once
// when asked, and at once when a range's entry has grown to
// FlushEntryBytes or a range just acquired has made its first progress
// (checked five times per interval, and at least every 100 ms).
func (p *pipeline) flushLoop() {
	t := time.NewTicker(p.c.cfg.FlushInterval)
	defer t.Stop()
	check := time.NewTicker(min(max(p.c.cfg.FlushInterval/5, 10*time.Millisecond), 100*time.Millisecond))
	defer check.Stop()
	large := make(map[string]bool) // ranges whose entry is at the bound
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		case <-p.flushCh:
		case <-check.C:
			atBound := p.entriesAtBound(large)
			if !atBound && !p.freshProgress() {
				continue
			}
		}
		ctx, cancel := context.WithTimeout(p.ctx, p.c.cfg.EtcdTimeout)
		p.flush(ctx)
		cancel()
	}
}

// entriesAtBound reports whether the entry of a changed range has reached
// FlushEntryBytes since it was last seen below it: then the member flushes
// now, while etcd still takes the entry (its request limit is 1.5 MiB by
// default), rather than at the next interval. large holds the ranges at
// the bound, so each crossing flushes early and logs once; the regular
// flushes carry the entry after that.
func (p *pipeline) entriesAtBound(large map[string]bool) bool {
	bound := p.c.cfg.FlushEntryBytes
	early := false
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range large {
		if p.mu.ranges[k] == nil {
			delete(large, k)
		}
	}
	for k, w := range p.mu.ranges {
		if w.inEtcd() {
			continue
		}
		if entrySizeBound(w.st.Pending()) < bound {
			delete(large, k)
			continue
		}
		n := len(ledger.Encode(w.st.Entry()))
		if n < bound {
			delete(large, k)
			continue
		}
		if !large[k] {
			large[k] = true
			early = true
			p.log.Info("ledger entry reached FlushEntryBytes; flushing it now, before the next flush interval",
				"range", k, "bytes", n, "flush_entry_bytes", bound, "pending", w.st.Pending(),
				"hint", "an entry over etcd's --max-request-bytes (1.5 MiB by default) cannot be written; fewer records in flight (MaxInFlight) keep entries small")
		}
	}
	return early
}

// freshProgress reports whether a range acquired since its last write has
// moved its watermark: a handoff's new owner writes it at once, so that the
// leader's next commit round sees the moved range move (at P = 4,096 the
// last 150 moved partitions waited for the flush interval, then for the
// commit round after it).
func (p *pipeline) freshProgress() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.mu.ranges {
		if w.fresh && w.st.Version() != w.flushed && w.st.Watermark() > w.acquiredWM {
			return true
		}
	}
	return false
}

// entrySizeBound is a cheap upper bound of the encoded size of an entry
// with pending offsets in all: an offset takes at most 20 bytes in JSON
// with its comma, and 4 KiB covers the envelope and a few dozen segments
// (64 segments with 13-digit offsets and nothing pending: 3,501 bytes). A
// range holds one segment per owner whose state it inherited, and a merged
// range one per range it joined (coord/internal/plan/merge.go: at most MaxTxnOps/2 of
// them, 64 by default) until records fetched past those states let
// neighbouring segments join again. Only an entry this bound puts near
// FlushEntryBytes is encoded to be measured.
func entrySizeBound(pending int) int {
	return 4<<10 + 21*pending
}

// flushedAs is, for a range a flush writes, the state version and the
// loss reports it writes, and the state they were taken from: a range
// reloaded meanwhile (an operator's reset, a range acquired again) is
// another *owned, which the flush did not write.
type flushedAs struct {
	w         *owned
	version   uint64
	watermark int64
	losses    int
}

// flushWritesLocked returns the writes of the ranges whose state changed
// since their last write, what each writes (by range key), and the bytes
// they send.
func (p *pipeline) flushWritesLocked() (writes []coord.RangeFlush, versions map[string]flushedAs, bytes int) {
	versions = make(map[string]flushedAs)
	for k, w := range p.mu.ranges {
		if w.inEtcd() {
			continue
		}
		e := w.st.Entry()
		v := ledger.Encode(e) // once: for the write and for the byte count
		writes = append(writes, coord.RangeFlush{Range: w.rs, Entry: e, Encoded: v, Losses: slices.Clone(w.losses)})
		bytes += len(w.rs.LedgerKey) + len(v)
		versions[k] = flushedAs{w: w, version: w.st.Version(), watermark: w.st.Watermark(), losses: len(w.losses)}
	}
	return writes, versions, bytes
}

// flush writes every range whose state changed since its last write, in
// fenced transactions. A fenced range makes the fetch loop reread the
// assignment: the leader may only have split it.
func (p *pipeline) flush(ctx context.Context) {
	p.mu.Lock()
	completions := p.mu.unflushed
	skips := p.takeSkipsLocked() // their completions are in this flush's entries
	writes, versions, bytes := p.flushWritesLocked()
	p.mu.Unlock()
	if len(writes) == 0 {
		p.mu.Lock()
		p.mu.unflushed -= completions
		skips = p.flushedSkipsLocked(skips, (*owned).inEtcd)
		p.mu.Unlock()
		p.deleteSkips(ctx, skips)
		return
	}
	start := time.Now()
	err := p.sess.Flush(ctx, writes)
	p.c.flushSeconds.Observe(time.Since(start).Seconds())
	var fenced *coord.FencedError
	var tooLarge *coord.TooLargeError
	if err != nil && !errors.As(err, &fenced) && !errors.As(err, &tooLarge) {
		if ctx.Err() == nil {
			p.log.Warn("flush ledger", "error", err)
		}
		p.mu.Lock()
		p.mu.skipsDone, p.mu.skipsDeleting = append(p.mu.skipsDone, skips...), nil // with the next flush
		p.mu.Unlock()
		return
	}
	bad := make(map[string]bool)
	if fenced != nil {
		for _, k := range fenced.Keys {
			bad[k] = true
		}
		p.log.Log(flushFencedLevel(fenced), "ledger write fenced; rereading the assignment", "keys", len(fenced.Keys), "session", fenced.Session)
		poke(p.resync)
	}
	if tooLarge != nil {
		// Those ranges stay dirty and are tried again at every flush;
		// the rest of the member's progress is recorded and it keeps
		// taking records (no stall behind one entry).
		for _, k := range tooLarge.Keys {
			bad[k] = true
		}
		p.log.Error("ledger entries too large for etcd; their ranges' progress is not recorded until they shrink", "error", tooLarge)
	}
	p.mu.Lock()
	for k, v := range versions {
		if w := p.mu.ranges[k]; w == v.w && !bad[w.rs.Key] {
			w.flushed, w.dirty = v.version, false
			w.flushedWM = v.watermark
			if v.watermark > w.acquiredWM {
				w.fresh = false // its first move is written
			}
			w.losses = w.losses[v.losses:]
			p.c.metrics.retentionLosses.Add(int64(v.losses))
		}
	}
	p.mu.unflushed -= completions
	skips = p.flushedSkipsLocked(skips, func(w *owned) bool {
		if v, ok := versions[w.rs.Key]; ok {
			return v.w == w && !bad[w.rs.Key]
		}
		return w.inEtcd() // all written before this flush
	})
	p.mu.Unlock()
	p.deleteSkips(ctx, skips)
	poke(p.space)
	p.c.metrics.flushes.Add(1)
	p.c.metrics.flushBytes.Add(int64(bytes))
	p.log.Trace("flushed ledger", "ranges", len(writes), "took", time.Since(start))
}
