package coord

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// Releasing revoked ranges to the leader: the second half of a handoff.

// RangeRelease is one revoked range to release.
type RangeRelease struct {
	Range  schema.RangeState // the range as assigned (its Rev is the guard)
	Final  ledger.Entry      // its final completion state
	Losses []LossReport      // loss reports not yet written
	// Written says etcd already holds Final: the member's last flush of
	// the range wrote it, or the member loaded it and has not changed it
	// since. The release then rewrites only the range record, one
	// operation instead of two: a leave of 2,048 ranges, most of them
	// idle, costs half the transactions. When in doubt leave it false.
	Written bool
}

// releaseRanges acknowledges revoked ranges: for each it writes the final
// ledger entry (unless etcd holds it: RangeRelease.Written) and the loss
// reports not yet written, and marks the range released, atomically and
// fenced by the member's ownership of that range. Many ranges share a
// transaction (up to Config.MaxTxnOps operations, one or two per range,
// and about 1 MiB), so releasing 2,048 ranges costs tens of round trips,
// not thousands. A range that is fenced does not hold back the
// others: the result is a *FencedError naming the fenced ones, the rest are
// released. The leader then hands each released range to its next owner.
//
// A leaving member whose leader planned where its ranges go (handoff.go)
// writes each planned range active for its next owner instead, in the same
// transaction, under the same guards and the plan's revision; only the
// rest is released.
func (s *Session) releaseRanges(ctx context.Context, rels []RangeRelease) error {
	if h := s.handoffPlan(ctx); len(h.ByKey) > 0 {
		handed, rest, err := s.handOff(ctx, h, rels)
		if err != nil {
			return err
		}
		s.noteGone(handed, "handed off", func(rl RangeRelease) string { return h.ByKey[rl.Range.Key].To })
		if rels = rest; len(rels) == 0 {
			return nil
		}
	}
	writes := make([]write, 0, len(rels))
	now := time.Now().UTC()
	for _, rl := range rels {
		rec := rl.Range.Record
		rec.State, rec.Since = schema.StateReleased, now
		writes = append(writes, s.releaseWrite(rl, rec))
	}
	err := s.rec.record(ctx, s.common(), writes)
	var fenced *FencedError
	if err != nil && !errors.As(err, &fenced) {
		return err
	}
	bad := make(map[string]bool)
	if fenced != nil {
		for _, k := range fenced.Keys {
			bad[k] = true
		}
	}
	released := make([]RangeRelease, 0, len(rels))
	for _, rl := range rels {
		if !bad[rl.Range.Key] {
			released = append(released, rl)
		}
	}
	s.noteGone(released, "released", func(rl RangeRelease) string { return rl.Range.Record.Target })
	return err
}

// releaseWrite is the write that gives up rl, rewriting its record as rec:
// its final ledger entry (unless etcd holds it) and its loss reports not
// yet written, under the member's guard of the range.
func (s *Session) releaseWrite(rl RangeRelease, rec schema.RangeRecord) write {
	also := []clientv3.Op{clientv3.OpPut(rl.Range.Key, mustJSON(rec))}
	for _, l := range rl.Losses {
		also = append(also, s.lossOp(rl.Range, l))
	}
	return write{Key: rl.Range.LedgerKey, Name: rl.Range.Key, Entry: rl.Final, Guard: s.guard(rl.Range), Also: also, KeepEntry: rl.Written && len(rl.Losses) == 0}
}

// noteGone tells the view that rels are no longer this member's, ahead of
// its watch, and logs them ("range released", "ranges handed off", ...).
func (s *Session) noteGone(rels []RangeRelease, verb string, to func(RangeRelease) string) {
	if s.view != nil {
		done := make([]schema.RangeState, len(rels))
		for i, rl := range rels {
			done[i] = rl.Range
		}
		s.view.noteReleased(done)
	}
	switch {
	case len(rels) == 1:
		rec := rels[0].Range.Record
		s.log.Info("range "+verb, "topic", rec.Topic, "partition", rec.Partition, "range", rec.Range().String(), "to", to(rels[0]))
	case len(rels) > 1:
		s.log.Info("ranges "+verb, "count", len(rels), "ranges", textsafe.FirstFew(rels, ", ", func(rl RangeRelease) string {
			return fmt.Sprintf("%s/%d %s to %s", rl.Range.Record.Topic, rl.Range.Record.Partition, rl.Range.Record.Range(), to(rl))
		}))
	}
}

// ReleaseRanges acknowledges revoked ranges: for each it writes the final
// ledger entry (unless etcd holds it: RangeRelease.Written) and the loss
// reports not yet written, and marks the range released, atomically and
// fenced by the member's ownership of that range (see releaseRanges). Calls
// made at about the same time, such as the drains of a member that leaves
// or loses many ranges at once, each releasing one range, share
// transactions: each call waits for the batch that carries its ranges. A
// range that is fenced does not hold back the others: the result is a
// *FencedError naming the fenced ones among this call's ranges, the rest
// are released. When ctx ends first, the release may still be written (as
// when a transaction times out).
func (s *Session) ReleaseRanges(ctx context.Context, rels []RangeRelease) error {
	if len(rels) == 0 {
		return nil
	}
	req := &releaseRequest{ctx: ctx, rels: rels, done: make(chan struct{})}
	select {
	case s.releases <- req:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.ctx.Done():
		return fmt.Errorf("coord: release %s (%d range(s)): %w", rels[0].Range.Key, len(rels), context.Cause(s.ctx))
	}
	select {
	case <-req.done:
		return req.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// releaseRequest is one ReleaseRanges call waiting for its batch.
type releaseRequest struct {
	ctx  context.Context
	rels []RangeRelease
	err  error
	done chan struct{}
}

// writeReleases writes the ranges of concurrent ReleaseRanges calls, all
// that wait at the time in one releaseRanges call, until the session ends.
// While one batch is written the next gathers.
func (s *Session) writeReleases() {
	for {
		var batch []*releaseRequest
		select {
		case <-s.ctx.Done():
			return
		case req := <-s.releases:
			batch = append(batch, req)
		}
	gather:
		for {
			select {
			case req := <-s.releases:
				batch = append(batch, req)
			default:
				break gather
			}
		}
		s.writeBatch(batch)
	}
}

// writeBatch releases the ranges of batch and tells each caller its result.
func (s *Session) writeBatch(batch []*releaseRequest) {
	rels := make([]RangeRelease, 0, len(batch))
	live := batch[:0]
	for _, req := range batch {
		if req.ctx.Err() != nil {
			req.err = req.ctx.Err() // the caller has gone: write nothing for it
			close(req.done)
			continue
		}
		live = append(live, req)
		rels = append(rels, req.rels...)
	}
	if len(live) == 0 {
		return
	}
	// The session's context, not a caller's: one caller giving up must not
	// fail the others' writes. Past a TTL the session is gone anyway.
	ctx, cancel := context.WithTimeout(s.ctx, max(s.ttl, 5*time.Second))
	err := s.releaseRanges(ctx, rels)
	cancel()
	var fenced *FencedError
	errors.As(err, &fenced)
	bad := make(map[string]bool)
	if fenced != nil {
		for _, k := range fenced.Keys {
			bad[k] = true
		}
	}
	for _, req := range live {
		switch {
		case fenced == nil:
			req.err = err
		default:
			var keys []string
			for _, rl := range req.rels {
				if bad[rl.Range.Key] {
					keys = append(keys, rl.Range.Key)
				}
			}
			if len(keys) > 0 {
				req.err = &FencedError{Keys: keys, Session: fenced.Session}
			}
		}
		close(req.done)
	}
}
