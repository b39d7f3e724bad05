package consumer

import (
	"cmp"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// The range table: the ranges a member works on, with their in-memory
// ledger state, and the pure functions over it.

// owned is a range this member works on, with its in-memory ledger state.
type owned struct {
	rs       schema.RangeState // the range record as last read (its Rev is the guard)
	st       *ledger.State
	flushed  uint64 // st.Version() last written to etcd
	dirty    bool   // never written since acquired
	revoking bool
	// reset is the reset epoch (state.RangeRecord.Reset) st was loaded at,
	// or inherited from the range it was cut from: a record whose epoch is
	// above it means an operator reset the range, and st is stale.
	reset    int64
	draining bool // a drainer goroutine is releasing it
	// releasing: the drain's release is on its way to etcd, carrying st
	// as it stood. The range stays revoking until it is answered, even if
	// the leader takes the revoke back meanwhile (drain.go, releaseOf).
	releasing bool
	// behind: while releasing, an assignment showed a newer record of
	// the range than rs, which stays the record the release answers
	// (reconcileTable); the drain's answer decides what becomes of it.
	behind bool
	// fresh: acquired (handed over, failed over, or new) and no state
	// written since that moves its watermark. That state is flushed at
	// once (flush.go), not at the next flush interval: a moved range's
	// records count as done for the leader's commit rounds only once its
	// watermark in etcd has moved. A flush of records merely dispatched
	// (which changes the state too) leaves it fresh.
	fresh      bool
	acquiredWM int64 // st.Watermark() when acquired
	flushedWM  int64 // st.Watermark() as last flushed (keyops.go)
	// drains counts the drains started; a drainer goes on only while it is
	// the latest and the range is still revoking.
	drains int
	// losses are records Kafka deleted before the range handled them, not
	// yet reported: the next flush writes them with the ledger entry.
	losses []coord.LossReport

	// hot are the range's hot keys as its last load report measured them
	// (load.go), for Status; nil while it is handed over.
	hot []HotKey

	// gone: the range left the table (reconcileTable, dropReleased). A
	// record dispatched under it completes in the range that holds its
	// hash now (currentRange); while it is not gone, that is this one.
	gone bool
	// jobs are the partition's in-flight records
	// (inFlight.partitionJobs), shared with its other ranges; nil until
	// the range dispatches one.
	jobs *jobList

	// Stuck detection (stuck.go).
	lastWM  int64
	wmSince time.Time
	stuck   bool
	// stuckByPrelude: the report is of a prelude's failing record, not of
	// a held watermark; it is withdrawn once that record is done.
	stuckByPrelude bool
}

// inEtcd reports whether etcd holds w's state as it is now: written by its
// last flush, or loaded and not changed since.
func (w *owned) inEtcd() bool { return !w.dirty && w.st.Version() == w.flushed }

func (o *owned) tp() tp { return o.rs.TP() }

// currentRange is the range of byTP that holds j's hash now: the range j was
// dispatched under unless that left the table (split, reset, dropped or
// released), or nil.
func currentRange(byTP map[tp][]*owned, j *job) *owned {
	if !j.w.gone {
		return j.w
	}
	return holding(byTP, j.tp(), j.hash())
}

// containing returns the range of partition t's ranges (byTP[t]) that
// covers r. Looking in the partition's ranges only, not in all of them,
// keeps a reconcile linear in the ranges: at P = 4,096 a member taking
// 2,048 partitions over spent about 0.35 s in it, holding the pipeline's
// lock.
func containing(byTP map[tp][]*owned, t tp, r ledger.HashRange) *owned {
	for _, w := range byTP[t] {
		if w.st.Range().Intersect(r) == r {
			return w
		}
	}
	return nil
}

// clipLosses is the share of unreported losses that falls in r.
func clipLosses(losses []coord.LossReport, r ledger.HashRange) []coord.LossReport {
	var out []coord.LossReport
	for _, l := range losses {
		if c, ok := l.Loss.Clip(r); ok {
			out = append(out, coord.LossReport{Loss: c, At: l.At})
		}
	}
	return out
}

func inRanges(rs []ledger.HashRange, h uint32) bool {
	for _, r := range rs {
		if r.Contains(h) {
			return true
		}
	}
	return false
}

// holding is the range of partition t's ranges (byTP[t]) that holds h, or
// nil.
func holding(byTP map[tp][]*owned, t tp, h uint32) *owned {
	for _, w := range byTP[t] {
		if w.st.Range().Contains(h) {
			return w
		}
	}
	return nil
}

// ownsHash reports whether one of partition t's ranges (byTP[t]) holds h.
func ownsHash(byTP map[tp][]*owned, t tp, h uint32) bool { return holding(byTP, t, h) != nil }

// drainBudget is how long the owner of revoking range rec may drain it: the
// leader's budget written in the record, else the member's own DrainTimeout
// (a record from a leader that does not write one).
func drainBudget(rec schema.RangeRecord, own time.Duration) time.Duration {
	if rec.DrainMs > 0 {
		return time.Duration(rec.DrainMs) * time.Millisecond
	}
	return own
}

// rangeTable is what a member works on and what it asks its fetcher for,
// with no Kafka or etcd in it: reconcileTable changes it, the drivers
// (reconcile.go, fetch.go, drain.go) apply the changes. It lives in
// pipeline.mu.
type rangeTable struct {
	ranges   map[string]*owned // by range key
	byTP     map[tp][]*owned   // sorted by first hash
	assigned map[tp]bool       // partitions the fetcher fetches
	pos      map[tp]int64      // next offset the fetcher will deliver
	// released holds the ranges this member's drains have released (or
	// lost with the session), by range key, with the record revision they
	// were released at, until an assignment no longer lists that record. The
	// fetch loop may be applying an assignment read before the release
	// (assignments of a large leave come one after the other while drains
	// release): it still lists the range as revoking, and taking it up
	// again would drain and release it a second time, fenced (an etcd
	// transaction each: about 600 of 2,048 ranges in a P = 4,096 leave).
	released map[string]int64
	// leaving: the member is leaving the group, and takes no revoke back.
	leaving bool
	// shares: the partitions paused for holding more than their share of
	// the in-flight bound (backpressure.go).
	shares partitionShares
	// reapply: a drain released a range whose newer record the latest
	// assignment lists (dropReleased); the fetch loop applies that
	// assignment again (fetch.go).
	reapply bool
}

func newRangeTable() rangeTable {
	return rangeTable{
		ranges:   make(map[string]*owned),
		byTP:     make(map[tp][]*owned),
		assigned: make(map[tp]bool),
		pos:      make(map[tp]int64),
		released: make(map[string]int64),
		shares:   partitionShares{paused: make(map[tp]bool)},
	}
}

// dropReleased takes w out of the table once its drain has released it (or
// found the session gone: it is no longer this member's either way).
//
// w.rs is the record the release answered, even if an assignment applied
// meanwhile showed a newer one (w.behind): once the release commits, the
// leader may hand the range straight back to this member (or revoke it
// again), and the member's view can show that before the release's answer
// comes. That newer record is not released, and no new assignment may
// come to take it up: the table asks for the latest assignment to be
// applied again (reapply), which starts the range from the ledger entry it
// lists, the state the release wrote, as for any range handed over.
func (t *rangeTable) dropReleased(w *owned) {
	if t.ranges[w.rs.Key] != w {
		return
	}
	if w.behind {
		w.behind = false
		t.reapply = true
	}
	delete(t.ranges, w.rs.Key)
	w.gone = true
	t.byTP[w.tp()] = slices.DeleteFunc(t.byTP[w.tp()], func(x *owned) bool { return x == w })
	t.released[w.rs.Key] = w.rs.Rev
}

// partitionOffset is a partition and an offset in it.
type partitionOffset struct {
	tp
	offset int64
}

// fetchPlan is what the fetcher must change: start fetching partitions
// (assign, at an offset), fetch others again from an earlier offset (seek),
// and stop fetching the partitions no range needs (unassign).
type fetchPlan struct {
	assign, seek []partitionOffset
	unassign     []partitionOffset // offset unused
}

func (f fetchPlan) empty() bool { return len(f.assign)+len(f.seek)+len(f.unassign) == 0 }

// drainStart asks for a drainer of revoked range w (drain.go).
type drainStart struct {
	w      *owned
	seq    int // w.drains when it started
	budget time.Duration
}

// reconciled is what reconcileTable leaves to its driver.
type reconciled struct {
	fetch  fetchPlan
	cancel []*job // in-flight records on hash space no longer owned
	drains []drainStart
	// needStart are the partitions of new ranges left out for want of a
	// start offset: no ledger state, and no range in the table to keep or
	// clip the state of (whatever the record's entry says), and not
	// released already. The caller reads their offsets and applies the
	// assignment again with them. Only these need one: the assignment
	// view reads a range's entry only when its record changes, so a range
	// first assigned without state shows an empty entry for as long as
	// its record stays, and asking for every such range made each
	// reconcile of a P = 4,096 member read the start offsets of all its
	// 2,048 partitions (1.6 s, on both members, at the start of a leave).
	needStart []tp
}

// updateRevoke gives w, the table's range for r, r's record and revoke:
// a revoke taken back keeps the range (once no release is on its way) and
// fetches it again from its watermark (seek), and a new revoke returns
// the drain to start.
func updateRevoke(t *rangeTable, w *owned, r schema.RangeState, seek map[tp]bool, drainTimeout time.Duration, log hclog.Logger, events *rangeEvents) (drainStart, bool) {
	pt := r.TP()
	wasRevoking := w.revoking
	if w.releasing && r.Rev != w.rs.Rev {
		// The release on its way answers rs and is guarded by its
		// revision: rs stays that record until the answer, which
		// dropReleased (released: the newer record is taken up by
		// applying the assignment again) or the drain (fenced: the
		// assignment is read again) applies.
		w.behind = true
	} else {
		w.rs, w.behind = r, false
	}
	w.revoking = r.Record.State == schema.StateRevoking
	if wasRevoking && !w.revoking && (w.releasing || t.leaving) {
		// Not taken back yet: a release on its way may still be
		// written, and its final state would miss any record run
		// from now on (its drain applies the take-back once the
		// release is refused). A leaving member's every range shows
		// as revoking (coord), so an assignment that shows one
		// active was read before the leave.
		w.revoking = true
	}
	if wasRevoking && !w.revoking {
		seek[pt] = true // it observed nothing while revoking: fetch again from its watermark
		if w.draining {
			// The leader took the revoke back: the drainer stops
			// (the caller broadcasts) and a later revoke starts a
			// new one.
			w.draining = false
			log.Info("revoke taken back; keeping the range", "topic", pt.Topic, "partition", pt.Partition, "range", r.Record.Range().String())
		}
	}
	if w.revoking && !w.draining {
		w.draining = true
		w.drains++
		events.revoked = append(events.revoked, rangeEvent{pt, r.Record.Range(), []any{"to", r.Record.Target}})
		return drainStart{w: w, seq: w.drains, budget: drainBudget(r.Record, drainTimeout)}, true
	}
	return drainStart{}, false
}

// installRanges makes next t's ranges, by key and by partition (each
// partition's in hash order), marking the ranges of old not in it gone.
func installRanges(t *rangeTable, old, next map[string]*owned) {
	for _, w := range old {
		w.gone = true
	}
	for _, w := range next {
		w.gone = false
	}
	t.ranges = next
	t.byTP = make(map[tp][]*owned)
	for _, w := range next {
		t.byTP[w.tp()] = append(t.byTP[w.tp()], w)
	}
	for pt := range t.byTP {
		slices.SortFunc(t.byTP[pt], func(a, b *owned) int { return cmp.Compare(a.rs.Record.Lo, b.rs.Record.Lo) })
	}
}

// cancelGone returns the in-flight records of old's ranges on hash space
// the table no longer owns, or reset, and notes the ranges dropped.
func cancelGone(t *rangeTable, old map[string]*owned, jobs map[tp]*jobList, reset map[tp][]ledger.HashRange, events *rangeEvents) (cancel []*job) {
	for _, w := range old {
		pt := w.tp()
		for j := range jobs[pt].all() {
			if w.st.Range().Contains(j.hash()) && (!ownsHash(t.byTP, pt, j.hash()) || inRanges(reset[pt], j.hash())) {
				cancel = append(cancel, j)
			}
		}
		if !ownsHash(t.byTP, pt, uint32(w.st.Range().Lo)) {
			events.dropped = append(events.dropped, rangeEvent{pt, w.st.Range(), nil})
		}
	}
	return cancel
}

// planFetch works out what the fetcher must fetch: each partition from
// the lowest watermark of its ranges that are not revoking, assigned if
// new, sought back if a newly started range (seek) needs older records
// than the fetch position, sought to the new position after a reset,
// unassigned when no range needs it. It keeps t's fetch state with it.
func planFetch(t *rangeTable, seek map[tp]bool, reset map[tp][]ledger.HashRange) (f fetchPlan) {
	want := make(map[tp]int64)
	for pt, ws := range t.byTP {
		for _, w := range ws {
			if w.revoking {
				continue
			}
			wm := w.st.Watermark()
			if cur, ok := want[pt]; !ok || wm < cur {
				want[pt] = wm
			}
		}
	}
	for pt, start := range want {
		switch {
		case !t.assigned[pt]:
			f.assign = append(f.assign, partitionOffset{pt, start})
			t.assigned[pt] = true
			t.pos[pt] = start
		case seek[pt] && start < t.pos[pt], len(reset[pt]) > 0 && start != t.pos[pt]:
			f.seek = append(f.seek, partitionOffset{pt, start})
			t.pos[pt] = start
		}
	}
	for pt := range t.assigned {
		if _, ok := want[pt]; !ok {
			f.unassign = append(f.unassign, partitionOffset{tp: pt})
			delete(t.assigned, pt)
			delete(t.pos, pt)
			delete(t.shares.paused, pt) // assigned again, it is resumed (syncPause)
		}
	}
	return f
}

// reconcileTable moves table t to assignment a, the way coord's plan moves
// the group: no I/O, and everything it needs done outside the table it
// returns. A range the table already covers keeps its in-memory state
// (clipped, with its share of unreported losses, if the leader split it); a
// new range starts from its ledger entry, or from starts (its partition's
// start offset, resolved by the caller) when it has none, and is left out
// if neither is known (res.needStart: the caller reads the offset and
// applies the assignment again); a range
// the member's drain has released already is left out (t.released); a
// revoked range gets a drainer (a revoke taken back stops it); a range no longer
// owned is dropped and its in-flight records (jobs) are to be cancelled.
// A range whose record carries a reset epoch above the one its state was
// loaded at was reset by an operator (keyshare group reset-offsets): its
// state is dropped and loaded again from the ledger entry the reset wrote,
// as for a new range, and its records still queued or running are
// cancelled, their outcome ignored (finish drops a job no longer in jobs),
// so nothing completed before the reset is written over it; those at or
// above the new position run again. Then each partition is fetched from
// the lowest watermark of its ranges that are not revoking: assigned if
// new, sought back if a newly started range needs older records than the
// fetch position, sought to the new position (back or forward) after a
// reset, unassigned when no range needs it. drainTimeout is the member's own drain budget, used when
// the record carries none. log gets the lifecycle events (range acquired,
// revoked, dropped), a line per kind when there are many (rangeEvents).
//
// The owned values of t are updated in place and t's maps replaced; the
// caller holds the lock that guards them.
func reconcileTable(t *rangeTable, jobs map[tp]*jobList, a schema.Assignment, starts map[tp]int64, drainTimeout time.Duration, log hclog.Logger) reconciled {
	var res reconciled
	old, oldByTP := t.ranges, t.byTP
	next := make(map[string]*owned, len(a.Ranges))
	seek := make(map[tp]bool)
	reset := make(map[tp][]ledger.HashRange) // hash space reloaded after a reset
	listed := make(map[string]bool, len(t.released))
	asked := make(map[tp]bool)
	var events rangeEvents
	defer events.log(log)
	for _, r := range a.Ranges {
		if rev, ok := t.released[r.Key]; ok && rev == r.Rev {
			listed[r.Key] = true
			continue // released already; this assignment was read before
		}
		pt := r.TP()
		src := containing(oldByTP, pt, r.Record.Range())
		var losses []coord.LossReport // src's unreported losses, if its state is dropped
		if src != nil && r.Record.Reset > src.reset {
			log.Info("range reset by an operator; dropping its state and loading the reset's ledger entry", "topic", pt.Topic, "partition", pt.Partition,
				"range", r.Record.Range().String(), "reset_epoch", r.Record.Reset, "loaded_epoch", src.reset)
			losses = clipLosses(src.losses, r.Record.Range())
			reset[pt] = append(reset[pt], r.Record.Range())
			src = nil // start it as a new range
		}
		var w *owned
		switch {
		case src != nil && src.rs.Record.Range() == r.Record.Range():
			w = src
		case src != nil:
			w = &owned{st: src.st.Clip(r.Record.Range()), flushed: 0, revoking: src.revoking, reset: src.reset}
			w.losses = clipLosses(src.losses, r.Record.Range()) // not reported yet: the part reports its share
		default:
			start, ok := starts[pt]
			if !r.Entry.Initialized() && !ok {
				if !asked[pt] {
					asked[pt] = true
					res.needStart = append(res.needStart, pt)
				}
				continue
			}
			st, err := ledger.NewState(r.Record.Range(), r.Entry, start)
			if err != nil {
				log.Error("cannot load range state", "key", r.LedgerKey, "error", err)
				continue
			}
			// The records Kafka deleted before a reset range handled them
			// were still lost: they are reported with its next flush.
			w = &owned{st: st, dirty: !r.Entry.Initialized(), reset: r.Record.Reset, losses: losses, fresh: true, acquiredWM: st.Watermark()}
			seek[pt] = true
			events.acquired = append(events.acquired, rangeEvent{pt, r.Record.Range(), []any{"watermark", st.Watermark()}})
		}
		if d, ok := updateRevoke(t, w, r, seek, drainTimeout, log, &events); ok {
			res.drains = append(res.drains, d)
		}
		next[r.Key] = w
	}
	installRanges(t, old, next)
	// In-flight work on hash space no longer owned, or reset, is cancelled.
	res.cancel = cancelGone(t, old, jobs, reset, &events)
	for k := range t.released {
		if !listed[k] {
			delete(t.released, k) // assignments have moved past the release
		}
	}

	res.fetch = planFetch(t, seek, reset)
	return res
}
