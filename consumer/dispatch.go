package consumer

import (
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/ledger"
)

// Filter and dispatch: each fetched record through its partition's ranges
// to the scheduler, and each outcome back to the ledger.

// handle filters records, fetched at at, through the ranges of their
// partitions, and queues those that run: under one hold of the
// pipeline's lock, and of the scheduler's (submitLocked), for all of them.
func (p *pipeline) handle(ms []*kafka.Message, at time.Time) {
	p.c.metrics.fetched.Add(int64(len(ms)))
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.mu.fetching {
		return
	}
	var run partitionRun
	for _, m := range ms {
		p.filterLocked(&run, m, at)
	}
	p.endRunLocked(&run)
	p.submitLocked(at)
}

// partitionRun is the partition of the records handle is filtering, with
// its ranges and fetch position, read from the table when the partition
// changes and its position written back when it changes again: a burst's
// records mostly come from one partition, and the table's maps are keyed
// by partition, which costs a hash of its topic at every lookup.
type partitionRun struct {
	t      tp
	ranges []*owned // p.mu.byTP[t]
	pos    int64    // p.mu.pos[t], moved past each record filtered
	known  bool     // p.mu.pos holds t
	active bool     // t is set: a record of it was filtered
}

// startRunLocked makes run partition t's, after ending the run before.
func (p *pipeline) startRunLocked(run *partitionRun, t tp) {
	p.endRunLocked(run)
	p.fetchingAgainLocked(t) // gaps.go
	pos, known := p.mu.pos[t]
	*run = partitionRun{t: t, ranges: p.mu.byTP[t], pos: pos, known: known, active: true}
}

// endRunLocked writes run's position back to the table.
func (p *pipeline) endRunLocked(run *partitionRun) {
	if run.active {
		p.mu.pos[run.t] = run.pos
	}
}

// filterLocked moves the partition's position past m and records it in
// the ledger of each range of the partition; the range that answers Run
// takes it (dispatchLocked). run is the partition of the record before.
func (p *pipeline) filterLocked(run *partitionRun, m *kafka.Message, at time.Time) {
	t := tp{Topic: *m.TopicPartition.Topic, Partition: m.TopicPartition.Partition}
	if !run.active || run.t != t {
		p.startRunLocked(run, t)
	}
	o := int64(m.TopicPartition.Offset)
	h := ledger.Hash(m.Key, o)
	if run.known {
		p.skipRangesLocked(t, run.ranges, run.pos, o) // offsets between the position and o hold no record (gaps.go)
	}
	run.pos, run.known = o+1, true
	var taker *owned
	for _, w := range run.ranges {
		if w.revoking {
			// A revoked range takes no new records: its next stays where
			// it is, and the next owner fetches from there.
			continue
		}
		v, err := w.st.Observe(o, h)
		if err != nil {
			p.log.Error("ledger refused a fetched offset", "topic", t.Topic, "partition", t.Partition, "offset", o, "error", err)
			continue
		}
		if v == ledger.Run {
			taker = w
		}
	}
	if taker != nil {
		p.dispatchLocked(t, taker, m, o, h, at)
	}
}

// keyOf is the key whose records run one at a time in order, of m at o
// with hash h (ledger.Hash).
func keyOf(t tp, m *kafka.Message, o int64, h uint32) jobKey {
	k := jobKey{topic: t.Topic, partition: t.Partition, hash: h}
	if m.Key == nil {
		k.null, k.offset = true, o
	} else {
		k.key = string(m.Key)
	}
	return k
}

// dispatchLocked makes the record at o, fetched at at, which range w
// answered Run for, a job for submitLocked to queue behind the earlier
// records of its key; or shelves it if its key has shelved records
// (blocked.go).
func (p *pipeline) dispatchLocked(t tp, w *owned, m *kafka.Message, o int64, h uint32, at time.Time) {
	k := keyOf(t, m, o, h)
	if p.shelvedLocked(t, k) {
		p.shelveLocked(t, k, w.st, o, h) // behind the key's older shelved records
		return
	}
	j := &job{key: k, o: o, m: m, ctx: jobCtx{parent: p.ctx}, p: p, w: w, queued: at.Sub(p.epoch)}
	j.ctx.job = j
	p.mu.burstKeys = append(p.mu.burstKeys, k)
	p.mu.burstJobs = append(p.mu.burstJobs, j)
}

// submitLocked queues the jobs dispatchLocked made, in order, and
// shelves those whose key the scheduler finds blocked with a full queue
// (blocked.go): once one record of a key is refused, the key's later
// records of the burst are too, as the scheduler's answer for a key does
// not change under its lock.
func (p *pipeline) submitLocked(at time.Time) {
	if len(p.mu.burstJobs) == 0 {
		return
	}
	p.mu.burstQueued = slices.Grow(p.mu.burstQueued[:0], len(p.mu.burstJobs))[:len(p.mu.burstJobs)]
	// Queued before they are in jobs: their finish waits for p.mu, held
	// here.
	p.sched.SubmitAll(p.mu.burstKeys, p.mu.burstJobs, p.maxQueuedPerKey(), at, p.mu.burstQueued)
	for i, j := range p.mu.burstJobs {
		if !p.mu.burstQueued[i] {
			j.cancel()
			p.shelveLocked(j.tp(), j.key, j.w.st, j.o, j.hash())
			continue
		}
		jobs := p.mu.partitionJobs(j.w)
		if old := jobs.at(j.o); old != nil {
			// Not expected (the ledger answers InFlight for a record in
			// flight here), but if it happens the old job is abandoned:
			// its finish will find it gone and not count it again.
			p.dropJobLocked(old)
		}
		jobs.push(j)
		p.mu.track(j)
	}
	clear(p.mu.burstKeys)
	clear(p.mu.burstJobs)
	p.mu.burstKeys, p.mu.burstJobs = p.mu.burstKeys[:0], p.mu.burstJobs[:0]
}

// live reports whether the session is short of its conservative lease
// deadline, after which the leader may give the ranges away
// (coord/deadline.go): no record starts past it. A pipeline without a
// session (the scheduler's unit tests) is always live.
func (p *pipeline) live() bool {
	if f := liveCheck.Load(); f != nil {
		return (*f)(p)
	}
	return p.sessionLive()
}

func (p *pipeline) sessionLive() bool { return p == nil || p.sess == nil || p.sess.Live() }

// liveCheck, when set, answers live in place of the session: a test
// stands for a session whose deadline has passed while the goroutine
// that ends it has not run yet (a pause of the process). Tests set it for
// their own pipeline and let it answer sessionLive for the others.
var liveCheck atomic.Pointer[func(*pipeline) bool]

// errNotLive: the session's deadline passed before the record's call; the
// record is not started, and stays pending: given back (finish), for the
// range's next owner or for this member's next session.
var errNotLive = errors.New("consumer: the session's deadline has passed: no record starts")

// runJob runs on a worker, which took j at taken: it handles the record
// (unless its range was dropped meanwhile) and records the outcome.
func (p *pipeline) runJob(j *job, taken time.Time) {
	done := false
	// Live: not at or past the session's conservative lease deadline,
	// after which the leader may give the range away (coord/deadline.go).
	if j.ctx.Err() == nil && p.live() {
		// An error here means the record is not done: its context ended,
		// or the session is past its deadline, and finish gives it back
		// (the range's next owner runs it, or this member fetches it
		// again if it keeps the range). The record's busy time
		// starts when the worker took it (load.go), from the clock
		// reading the scheduler made then.
		err := p.c.process(&j.ctx, j, &p.mu.Mutex)
		if err == errParkQueued {
			// Its key's parker finishes it (parker.go), maybe already:
			// j is the parker's now, its busy time included.
			return
		}
		j.busy += time.Since(taken)
		done = err == nil
	}
	j.cancel()
	p.finish(j, done)
}

// dropJobLocked stops j and forgets it: its context ends, and it leaves
// its partition's jobs and the in-flight counts. Its worker's finish then
// finds it gone and counts nothing again (finish).
func (p *pipeline) dropJobLocked(j *job) {
	j.cancel()
	j.w.jobs.remove(j)
	p.mu.untrack(j)
}

// finish records that a dispatched record is done (or failed for good). A
// job is known by identity, not by its offset: one that was removed from
// its partition's jobs (its range dropped, drained or released) is
// abandoned and its outcome ignored, even if a new job of the same offset
// has been dispatched since (the range came back) and waits behind it.
func (p *pipeline) finish(j *job, done bool) {
	o, h := j.o, j.hash()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.mu.isInFlight(j) {
		return // abandoned: whoever removed it counted it out of inflight
	}
	j.w.jobs.remove(j)
	p.mu.untrack(j)
	p.mu.cond.Broadcast()
	poke(p.space)
	w := currentRange(p.mu.byTP, j)
	if w != nil {
		p.mu.load.add(w, h, j.m.Key, j.busy, done, j.since()) // load.go
	}
	if !done {
		if w != nil {
			p.giveBackLocked(j, w)
		}
		return
	}
	p.mu.unflushed++
	if p.mu.unflushed >= p.c.cfg.MaxUnflushed/2 {
		poke(p.flushCh) // flush early rather than let unflushed work pile up
	}
	if j.notes != nil && j.notes.skip != nil {
		p.mu.skipsDone = append(p.mu.skipsDone, *j.notes.skip)
	}
	if w != nil {
		if err := w.st.Complete(o, h); err != nil {
			p.log.Error("ledger refused a completion", "topic", j.key.topic, "partition", j.key.partition, "offset", o, "error", err)
		}
	}
}

// giveBackLocked gives back to the ledger j's record, which finished not
// done on w, a range this member still holds (a park or a prelude that
// could not go on, the session's deadline before its call): left in
// flight it would never run here again, the key's later records would
// overtake it and the range's watermark would stop at it. Its offset stays
// pending, out of flight, and so do those of its key's later records in
// flight here, taken out with it so that none overtakes it. A range that
// takes records shelves the key (blocked.go): the key's records fetched
// meanwhile are shelved behind it, and once its queue has emptied the
// partition is fetched again from it, in order. A revoking range hands
// them to its next owner as pending, or fetches them again from its
// watermark if the revoke is taken back, as after a drain's cancel.
func (p *pipeline) giveBackLocked(j *job, w *owned) {
	t, k := j.tp(), j.key
	back := []*job{j}
	for o := range p.mu.jobsOf(t) {
		if o.key == k && o.o > j.o {
			p.dropJobLocked(o)
			back = append(back, o)
		}
	}
	for _, b := range back {
		at := w
		if b != j {
			if at = currentRange(p.mu.byTP, b); at == nil {
				continue
			}
		}
		inEtcd := at.inEtcd()
		if err := at.st.Shelve(b.o, b.hash()); err != nil {
			p.log.Error("ledger refused to take back a record not done", "topic", t.Topic, "partition", t.Partition, "offset", b.o, "error", err)
			continue
		}
		if inEtcd {
			at.flushed = at.st.Version() // a stored field changes no more than after a drain's cancel
		}
		if !at.revoking {
			p.shelfFromLocked(t, k, b.o, b.hash())
		}
	}
	log := p.log.Warn
	if w.revoking || p.ctx.Err() != nil {
		log = p.log.Debug // handed over with the range, or the session is ending
	}
	log("record not done; its key's records are fetched again from it, in order", "topic", t.Topic, "partition", t.Partition,
		"offset", j.o, "key", textsafe.Bytes(j.m.Key), "records", len(back))
}

// shelfFromLocked makes key k's shelf of partition t start at o, if that
// is lower than where it starts (shelveLocked's bookkeeping, without the
// count of a blocked key's records).
func (p *pipeline) shelfFromLocked(t tp, k jobKey, o int64, h uint32) {
	if p.mu.shelves == nil {
		p.mu.shelves = make(map[tp]shelf)
	}
	sh := p.mu.shelves[t]
	if sh == nil {
		sh = make(shelf)
		p.mu.shelves[t] = sh
	}
	if s, ok := sh[k]; !ok || o < s.from {
		sh[k] = shelved{from: o, h: h}
	}
}
