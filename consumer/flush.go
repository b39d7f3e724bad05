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

// flushLoop writes changed ledger entries every flush interval, and at once
// when asked.
func (p *pipeline) flushLoop() {
	t := time.NewTicker(p.c.cfg.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		case <-p.flushCh:
		}
		ctx, cancel := context.WithTimeout(p.ctx, p.c.cfg.EtcdTimeout)
		p.flush(ctx)
		cancel()
	}
}

// flush writes every range whose state changed since its last write, in
// fenced transactions. A fenced range makes the fetch loop reread the
// assignment: the leader may only have split it.
func (p *pipeline) flush(ctx context.Context) {
	p.mu.Lock()
	completions := p.mu.unflushed
	var writes []coord.RangeFlush
	bytes := 0
	// written is, per range key, the state version and the loss reports
	// this flush writes.
	type written struct {
		version uint64
		losses  int
	}
	versions := make(map[string]written)
	for k, w := range p.mu.ranges {
		if !w.dirty && w.st.Version() == w.flushed {
			continue
		}
		e := w.st.Entry()
		v := ledger.Encode(e) // once: for the write and for the byte count
		writes = append(writes, coord.RangeFlush{Range: w.rs, Entry: e, Encoded: v, Losses: slices.Clone(w.losses)})
		bytes += len(w.rs.LedgerKey) + len(v)
		versions[k] = written{version: w.st.Version(), losses: len(w.losses)}
	}
	p.mu.Unlock()
	if len(writes) == 0 {
		p.mu.Lock()
		p.mu.unflushed -= completions
		p.mu.Unlock()
		return
	}
	start := time.Now()
	err := p.sess.Flush(ctx, writes)
	p.c.flushSeconds.Observe(time.Since(start).Seconds())
	var fenced *coord.FencedError
	if err != nil && !errors.As(err, &fenced) {
		if ctx.Err() == nil {
			p.log.Warn("flush ledger", "error", err)
		}
		return
	}
	bad := make(map[string]bool)
	if fenced != nil {
		for _, k := range fenced.Keys {
			bad[k] = true
		}
		p.log.Info("ledger write fenced; rereading the assignment", "keys", len(fenced.Keys), "session", fenced.Session)
		poke(p.resync)
	}
	p.mu.Lock()
	for k, v := range versions {
		if w := p.mu.ranges[k]; w != nil && !bad[w.rs.Key] {
			w.flushed, w.dirty = v.version, false
			w.losses = w.losses[v.losses:]
			p.c.metrics.retentionLosses.Add(int64(v.losses))
		}
	}
	p.mu.unflushed -= completions
	p.mu.Unlock()
	poke(p.space)
	p.c.metrics.flushes.Add(1)
	p.c.metrics.flushBytes.Add(int64(bytes))
	p.log.Trace("flushed ledger", "ranges", len(writes), "took", time.Since(start))
}
