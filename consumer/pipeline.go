package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/ledger"
)

type tp = coord.TopicPartition

// owned is a range this member works on, with its in-memory ledger state.
type owned struct {
	rs       coord.RangeState // the range record as last read (its Rev is the guard)
	st       *ledger.State
	flushed  uint64 // st.Version() last written to etcd
	dirty    bool   // never written since acquired
	revoking bool
	draining bool // a drainer goroutine is releasing it
	// drains counts the drains started; a drainer goes on only while it is
	// the latest and the range is still revoking.
	drains int
	// losses are records Kafka deleted before the range handled them, not
	// yet reported: the next flush writes them with the ledger entry.
	losses []lossReport

	// Stuck detection (stuck.go).
	lastWM  int64
	wmSince time.Time
	stuck   bool
}

func (o *owned) tp() tp { return o.rs.TP() }

type lossReport struct {
	loss ledger.Loss
	at   time.Time
}

// pipeline is a member's data path for one etcd session: fetch, filter,
// dispatch, complete, flush. When the session ends the whole pipeline is
// thrown away; the next session starts from etcd.
type pipeline struct {
	c     *Consumer
	sess  *coord.Session
	log   hclog.Logger
	kc    *kafka.Consumer
	ctx   context.Context // ends with the session or on stop
	stop  context.CancelFunc
	sched *scheduler

	resync  chan struct{} // ask the fetch loop to reread the assignment
	flushCh chan struct{} // ask the flusher to write now
	space   chan struct{} // a record finished: there may be room below the in-flight bound
	// retentionCh asks the fetch loop to look for deleted records again.
	retentionCh chan struct{}
	// boundSince is when the fetch loop reached the in-flight bound (zero
	// below it); only the fetch loop uses it.
	boundSince time.Time

	wg sync.WaitGroup
	mu struct {
		sync.Mutex
		cond     *sync.Cond // signalled when in-flight work finishes
		gen      int64
		rev      int64             // etcd revision of the assignment applied last
		ranges   map[string]*owned // by range key
		byTP     map[tp][]*owned   // sorted by first hash
		assigned map[tp]bool       // partitions assigned to the Kafka consumer
		pos      map[tp]int64      // next offset the fetcher will deliver
		paused   bool
		// held: an operator paused the group (coord.PauseRecord), or
		// the pause state is not read yet; the member takes no records.
		held      bool
		heldKnown bool // the pause state has been read once
		fetching  bool // false once leaving: no new records
		inflight  int
		// unflushed counts records completed since the flush that last
		// reached etcd: they would run again if the member crashed now.
		unflushed  int
		jobs       map[tp]map[int64]*job
		pendingAll int
		// halted are partitions whose unhandled records Kafka deleted,
		// held for an operator (RetentionLoss "halt").
		halted map[tp]bool
		// aboveEnd are partitions whose position is above the log end
		// (gaps.go); nil until one is found.
		aboveEnd map[tp]*AboveLogEnd
	}
}

func newPipeline(c *Consumer, sess *coord.Session) *pipeline {
	ctx, cancel := context.WithCancel(sess.Ctx())
	p := &pipeline{
		c: c, sess: sess, kc: c.kc, ctx: ctx, stop: cancel,
		log:     c.log.With("member", sess.ID()),
		resync:  make(chan struct{}, 1),
		flushCh: make(chan struct{}, 1),
		space:   make(chan struct{}, 1),

		retentionCh: make(chan struct{}, 1),
	}
	p.mu.cond = sync.NewCond(&p.mu.Mutex)
	p.mu.ranges = make(map[string]*owned)
	p.mu.byTP = make(map[tp][]*owned)
	p.mu.assigned = make(map[tp]bool)
	p.mu.pos = make(map[tp]int64)
	p.mu.jobs = make(map[tp]map[int64]*job)
	p.mu.halted = make(map[tp]bool)
	p.mu.fetching = true
	p.mu.held = true // until the first read of the pause state
	if c.cfg.BatchHandler != nil {
		p.sched = newBatchScheduler(c.cfg.Concurrency, c.cfg.MaxBatchSize, c.cfg.MaxBatchWait, p.runBatch) // batch.go
	} else {
		p.sched = newScheduler(c.cfg.Concurrency, p.runJob)
	}
	return p
}

func (p *pipeline) goFunc(fn func()) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		fn()
	}()
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// fetchLoop owns the Kafka consumer: it applies assignment changes, polls,
// filters and dispatches records, and pauses fetching at the in-flight bound.
func (p *pipeline) fetchLoop() error {
	defer p.unassignAll()
	for p.ctx.Err() == nil {
		select {
		case a := <-p.sess.Updates():
			if err := p.reconcile(a); err != nil {
				return err
			}
		case <-p.resync:
			snap, err := coord.ReadSnapshot(p.ctx, p.c.cli, p.sess.Schema())
			if err != nil {
				p.log.Warn("reread assignment", "error", err)
				poke(p.resync)
				sleep(p.ctx, 200*time.Millisecond)
				continue
			}
			if err := p.reconcile(snap.AssignmentOf(p.sess.ID())); err != nil {
				return err
			}
		case <-p.retentionCh:
			p.retention()
		case st := <-p.sess.PauseUpdates():
			p.hold(st)
		default:
		}
		if p.backpressure() {
			// Wait for a record to finish (or for updates and the pause
			// check).
			t := time.NewTimer(10 * time.Millisecond)
			select {
			case <-p.space:
			case <-t.C:
			case <-p.ctx.Done():
			}
			t.Stop()
			continue
		}
		switch ev := p.kc.Poll(50).(type) {
		case *kafka.Message:
			p.handle(ev)
		case kafka.PartitionEOF:
			p.partitionEOF(ev)
		case kafka.Error:
			if ev.IsFatal() {
				return fmt.Errorf("consumer: fatal Kafka error: %w", ev)
			}
			if ev.Code() == kafka.ErrAutoOffsetReset {
				p.retention()
				continue
			}
			p.log.Warn("kafka", "error", ev, "retriable", ev.IsRetriable())
		}
	}
	return nil
}

// retention handles a fetch whose offset is no longer in the log: Kafka
// deleted the records (retention, DeleteRecords) before this member read
// them. librdkafka (auto.offset.reset=error) stops fetching the partition
// and its error does not say which partition, so every assigned partition
// whose fetch position is below its log start is handled: each owned range
// moves its ledger past the deleted records it had not handled and keeps a
// report of them, which the next flush writes to etcd in the same fenced
// transaction as the ledger (see docs/consumer.md, "Records lost to
// retention"). Then the partition is fetched again from its log start.
//
// A partition that has not failed yet is handled too if its position is
// below the log start: librdkafka may still hold some of its deleted
// records, fetched but not delivered. Those are reported lost rather than
// handled (the reassignment drops librdkafka's queue); nothing is skipped
// without a report.
func (p *pipeline) retention() {
	p.mu.Lock()
	pos := make(map[tp]int64, len(p.mu.pos))
	for t := range p.mu.assigned {
		pos[t] = p.mu.pos[t]
	}
	p.mu.Unlock()
	var seeks []kafka.TopicPartition
	for t, at := range pos {
		low, high, err := p.kc.QueryWatermarkOffsets(t.Topic, t.Partition, 5000)
		if err != nil {
			p.log.Warn("read the log start after an offset-out-of-range error; will retry", "topic", t.Topic, "partition", t.Partition, "error", err)
			p.retryRetention()
			continue
		}
		if at >= low {
			p.checkAboveEnd(t, at, high)
			continue
		}
		p.mu.Lock()
		if p.c.cfg.RetentionLoss == "halt" {
			if !p.mu.halted[t] {
				p.mu.halted[t] = true
				p.log.Error("records were deleted from Kafka before they were handled; the partition is halted (RetentionLoss is \"halt\"): restart the members with RetentionLoss \"report\" to go on from the log start with a loss report",
					"topic", t.Topic, "partition", t.Partition, "position", at, "log_start", low)
			}
			p.mu.Unlock()
			continue
		}
		now := time.Now()
		for _, w := range p.mu.byTP[t] {
			if w.revoking {
				continue // its next owner finds the loss
			}
			loss, lost := w.st.Truncate(low)
			if !lost {
				continue
			}
			w.losses = append(w.losses, lossReport{loss: loss, at: now})
			p.log.Error("records were deleted from Kafka before they were handled; they are lost to retention and reported in etcd",
				"topic", t.Topic, "partition", t.Partition, "range", w.st.Range().String(),
				"lost_from", loss.Window(), "log_start", low, "known_pending_lost", loss.Known(),
				"report", p.sess.Schema().LostRange(t.Topic, t.Partition, w.rs.Record.Lo, low))
		}
		p.mu.pos[t] = low
		p.mu.Unlock()
		topic := t.Topic
		seeks = append(seeks, kafka.TopicPartition{Topic: &topic, Partition: t.Partition, Offset: kafka.Offset(low)})
	}
	if len(seeks) == 0 {
		return
	}
	poke(p.flushCh)
	// librdkafka has stopped fetching these partitions and refuses a seek
	// (its fetch state is "none"): assign them again at the log start.
	if err := p.reassign(seeks); err != nil {
		p.log.Warn("restart partitions at the log start; will retry", "error", err)
		p.retryRetention()
	}
}

// reassign makes librdkafka fetch parts from their offsets by unassigning
// and assigning them: unlike a seek, it works on a partition whose fetching
// librdkafka has stopped.
func (p *pipeline) reassign(parts []kafka.TopicPartition) error {
	if err := p.kc.IncrementalUnassign(parts); err != nil {
		return fmt.Errorf("unassign: %w", err)
	}
	if err := p.kc.IncrementalAssign(parts); err != nil {
		return fmt.Errorf("assign: %w", err)
	}
	p.syncPause(parts)
	return nil
}

// syncPause sets librdkafka's pause flag of freshly assigned partitions to
// the pipeline's: the flag outlives unassign and assign, so a partition
// paused by an earlier session would otherwise stay paused for good.
func (p *pipeline) syncPause(parts []kafka.TopicPartition) {
	p.mu.Lock()
	paused := p.mu.paused
	p.mu.Unlock()
	if paused {
		_ = p.kc.Pause(parts)
	} else if err := p.kc.Resume(parts); err != nil {
		p.log.Warn("resume newly assigned partitions", "error", err)
	}
}

// retryRetention runs retention again after a pause, from the fetch loop.
func (p *pipeline) retryRetention() {
	p.goFunc(func() {
		sleep(p.ctx, time.Second)
		poke(p.retentionCh)
	})
}

// handle filters one fetched record through the ranges of its partition.
func (p *pipeline) handle(m *kafka.Message) {
	t := tp{Topic: *m.TopicPartition.Topic, Partition: m.TopicPartition.Partition}
	o := int64(m.TopicPartition.Offset)
	h := ledger.Hash(m.Key, o)
	p.c.metrics.fetched.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.mu.fetching {
		return
	}
	p.skipAbsentLocked(t, o) // offsets between the position and o hold no record (gaps.go)
	p.mu.pos[t] = o + 1
	var run *owned
	for _, w := range p.mu.byTP[t] {
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
			run = w
		}
	}
	if run == nil {
		return
	}
	p.dispatchLocked(t, m, o, h)
}

func (p *pipeline) dispatchLocked(t tp, m *kafka.Message, o int64, h uint32) {
	ctx, cancel := context.WithCancel(p.ctx)
	j := &job{t: t, o: o, h: h, m: m, ctx: ctx, cancel: cancel, since: time.Now()}
	j.key = jobKey{topic: t.Topic, partition: t.Partition}
	if m.Key == nil {
		j.key.null, j.key.offset = true, o
	} else {
		j.key.key = string(m.Key)
	}
	jobs := p.mu.jobs[t]
	if jobs == nil {
		jobs = make(map[int64]*job)
		p.mu.jobs[t] = jobs
	}
	if old := jobs[o]; old != nil {
		// Not expected (the ledger answers InFlight for a record in flight
		// here), but if it happens the old job is abandoned: its finish
		// will find it gone and not count it again.
		old.cancel()
		p.mu.inflight--
	}
	jobs[o] = j
	p.mu.inflight++
	p.sched.submit(j)
}

// runJob runs on a worker: it handles the record (unless its range was
// dropped meanwhile) and records the outcome.
func (p *pipeline) runJob(j *job) {
	defer j.cancel()
	done := false
	if j.ctx.Err() == nil {
		// An error here means the context ended: the record stays
		// pending for the range's next owner.
		done = p.c.process(j.ctx, j, &p.mu.Mutex) == nil
	}
	p.finish(j, done)
}

// finish records that a dispatched record is done (or failed for good). A
// job is known by identity, not by its offset: one that was removed from
// p.mu.jobs (its range dropped, drained or released) is abandoned and its
// outcome ignored, even if a new job of the same offset has been dispatched
// since (the range came back) and waits behind it.
func (p *pipeline) finish(j *job, done bool) {
	t, o, h := j.t, j.o, j.h
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.jobs[t][o] != j {
		return // abandoned: whoever removed it counted it out of inflight
	}
	delete(p.mu.jobs[t], o)
	p.mu.inflight--
	p.mu.cond.Broadcast()
	poke(p.space)
	if !done {
		return
	}
	p.mu.unflushed++
	if p.mu.unflushed >= p.c.cfg.MaxUnflushed/2 {
		poke(p.flushCh) // flush early rather than let unflushed work pile up
	}
	for _, w := range p.mu.byTP[t] {
		if w.st.Range().Contains(h) {
			if err := w.st.Complete(o, h); err != nil {
				p.log.Error("ledger refused a completion", "topic", t.Topic, "partition", t.Partition, "offset", o, "error", err)
			}
			return
		}
	}
}

// pauseAfter is how long the member may sit at the in-flight bound before
// it pauses its partitions in librdkafka.
const pauseAfter = 500 * time.Millisecond

// backpressure applies the in-flight bound and reports whether the fetch
// loop must not take more records now. At the bound the loop stops polling
// (librdkafka stops fetching once its own queue, queued.max.messages.kbytes,
// is full). Only if the member stays at the bound for pauseAfter — a slow
// key, not a burst — are the partitions paused in librdkafka, which drops
// its fetched queue and fetches again on resume: pausing on every burst
// made a member five times slower on Parallel Consumer's workload.
func (p *pipeline) backpressure() bool {
	p.mu.Lock()
	// Unflushed completions count against the bound too: when etcd cannot
	// be written, the member stops taking records rather than pile up work
	// that a crash would run again.
	inflight, paused, held := p.mu.inflight, p.mu.paused, p.mu.held
	if p.mu.unflushed >= p.c.cfg.MaxUnflushed {
		inflight = max(inflight, p.c.cfg.MaxInFlight) // at the bound either way
	}
	var parts []kafka.TopicPartition
	if inflight >= p.c.cfg.MaxInFlight || paused || held {
		for t := range p.mu.assigned {
			parts = append(parts, kafka.TopicPartition{Topic: &t.Topic, Partition: t.Partition})
		}
	}
	p.mu.Unlock()
	limit := p.c.cfg.MaxInFlight
	if inflight < limit {
		p.boundSince = time.Time{}
	}
	switch {
	case held:
		// Paused by an operator: take nothing, and let librdkafka stop
		// fetching at once. In-flight records finish and are flushed.
		if !paused && len(parts) > 0 {
			if err := p.kc.Pause(parts); err != nil {
				p.log.Warn("pause", "error", err)
			} else {
				p.setPaused(true)
			}
		}
		return true
	case inflight >= limit:
		if p.boundSince.IsZero() {
			p.boundSince = time.Now()
		}
		if !paused && time.Since(p.boundSince) >= pauseAfter && len(parts) > 0 {
			if err := p.kc.Pause(parts); err != nil {
				p.log.Warn("pause", "error", err)
			} else {
				p.setPaused(true)
				p.log.Debug("paused fetching: at the in-flight bound for a while", "in_flight", inflight)
			}
		}
		return true
	case paused && inflight <= limit/2:
		if len(parts) > 0 {
			if err := p.kc.Resume(parts); err != nil {
				p.log.Warn("resume", "error", err)
				return false
			}
		}
		p.setPaused(false)
	}
	return false
}

// hold applies the group's pause state; backpressure does the rest.
func (p *pipeline) hold(st coord.PauseState) {
	p.mu.Lock()
	was, known := p.mu.held, p.mu.heldKnown
	p.mu.held, p.mu.heldKnown = st.Paused, true
	p.mu.Unlock()
	switch {
	case st.Paused && (!was || !known):
		p.log.Info("group paused by an operator: taking no records until it is resumed", "by", st.Record.By, "reason", st.Record.Reason)
	case !st.Paused && was && known:
		p.log.Info("group resumed")
	}
}

func (p *pipeline) setPaused(v bool) {
	p.mu.Lock()
	p.mu.paused = v
	p.mu.Unlock()
}

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
	// (All partitions at once: consumer/startoffsets.go.)
	var need []tp
	asked := make(map[tp]bool)
	for _, r := range a.Ranges {
		if !r.Entry.Initialized() && !asked[r.TP()] {
			asked[r.TP()] = true
			need = append(need, r.TP())
		}
	}
	starts, startErrs := p.c.startOffsets(p.ctx, p.sess.Schema(), need)
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
				if c, ok := l.loss.Clip(r.Record.Range()); ok {
					w.losses = append(w.losses, lossReport{loss: c, at: l.at})
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

// containing returns the range of old that covers r on partition t.
func (p *pipeline) containing(old map[string]*owned, t tp, r ledger.HashRange) *owned {
	for _, w := range old {
		if w.tp() == t && w.st.Range().Intersect(r) == r {
			return w
		}
	}
	return nil
}

func ownsHash(ranges map[string]*owned, t tp, h uint32) bool {
	for _, w := range ranges {
		if w.tp() == t && w.st.Range().Contains(h) {
			return true
		}
	}
	return false
}

// drainBudget is how long the owner of revoking range rec may drain it: the
// leader's budget written in the record, else the member's own DrainTimeout
// (a record from a leader that does not write one).
func drainBudget(rec coord.RangeRecord, own time.Duration) time.Duration {
	if rec.DrainMs > 0 {
		return time.Duration(rec.DrainMs) * time.Millisecond
	}
	return own
}

// drain finishes a revoked range: it waits until none of its records is in
// flight (or the drain budget is spent), then writes its final state and
// releases it to the leader; what is still in flight then is cancelled and
// runs again on the next owner. The budget runs on this member's monotonic
// clock from received, when reconcile saw the revoke: the record's Since is
// the leader's wall clock and says nothing here. seq is the drain's number
// (w.drains when it started): if the leader takes the revoke back, or a
// later revoke started another drain, this one stops without releasing.
func (p *pipeline) drain(w *owned, seq int, received time.Time, budget time.Duration) {
	deadline := received.Add(budget)
	timer := time.AfterFunc(time.Until(deadline), func() {
		p.mu.Lock()
		p.mu.cond.Broadcast()
		p.mu.Unlock()
	})
	defer timer.Stop()
	stop := context.AfterFunc(p.ctx, func() {
		p.mu.Lock()
		p.mu.cond.Broadcast()
		p.mu.Unlock()
	})
	defer stop()

	// current holds while this drain is still wanted (under p.mu).
	current := func() bool {
		return p.ctx.Err() == nil && p.mu.ranges[w.rs.Key] == w && w.revoking && w.drains == seq
	}
	p.mu.Lock()
	for current() && p.inFlightLocked(w) > 0 && time.Now().Before(deadline) {
		p.mu.cond.Wait()
	}
	if !current() {
		p.mu.Unlock()
		return
	}
	if n := p.inFlightLocked(w); n > 0 {
		p.log.Warn("drain budget spent with records in flight; they will run again on the next owner", "range", w.st.Range().String(), "in_flight", n, "budget", budget)
	}
	rs, final := w.rs, w.st.Entry()
	var losses []clientv3.Op
	for _, l := range w.losses {
		losses = append(losses, p.sess.LossOp(rs, l.loss, l.at))
	}
	p.mu.Unlock()

	for p.ctx.Err() == nil {
		err := p.sess.Release(p.ctx, rs, final, losses...)
		if err == nil {
			p.c.handoffSeconds.Observe(time.Since(received).Seconds())
			p.c.metrics.retentionLosses.Add(int64(len(losses)))
		}
		if err == nil || errors.Is(err, ledger.ErrFenced) {
			if err != nil {
				p.log.Warn("release fenced", "range", rs.Key, "error", err)
			}
			p.mu.Lock()
			if err != nil && !current() {
				// Fenced because the leader took the revoke back (or
				// revoked it again: a newer drain releases it).
				p.mu.Unlock()
				return
			}
			if p.mu.ranges[rs.Key] == w {
				delete(p.mu.ranges, rs.Key)
				p.mu.byTP[w.tp()] = slices.DeleteFunc(p.mu.byTP[w.tp()], func(x *owned) bool { return x == w })
				t := w.tp()
				for o, j := range p.mu.jobs[t] {
					if w.st.Range().Contains(j.h) {
						j.cancel()
						delete(p.mu.jobs[t], o)
						p.mu.inflight--
					}
				}
			}
			p.mu.Unlock()
			return
		}
		p.log.Warn("release", "range", rs.Key, "error", err)
		sleep(p.ctx, 200*time.Millisecond)
	}
}

// oldestLocked is when the oldest in-flight record of w was dispatched.
func (p *pipeline) oldestLocked(w *owned) time.Time {
	var oldest time.Time
	for _, j := range p.mu.jobs[w.tp()] {
		if w.st.Range().Contains(j.h) && (oldest.IsZero() || j.since.Before(oldest)) {
			oldest = j.since
		}
	}
	return oldest
}

// inFlightLocked counts the records of w handed to workers and not finished.
func (p *pipeline) inFlightLocked(w *owned) int {
	n := 0
	for _, j := range p.mu.jobs[w.tp()] {
		if w.st.Range().Contains(j.h) {
			n++
		}
	}
	return n
}

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
	var writes []ledger.Write
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
		wr := ledger.Write{Key: w.rs.LedgerKey, Entry: e, Value: v, Guard: p.sess.Guard(w.rs)}
		for _, l := range w.losses {
			wr.Also = append(wr.Also, p.sess.LossOp(w.rs, l.loss, l.at))
		}
		writes = append(writes, wr)
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
	err := p.sess.Recorder().Record(ctx, p.sess.Common(), writes)
	p.c.flushSeconds.Observe(time.Since(start).Seconds())
	var fenced *ledger.FencedError
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
		if w := p.mu.ranges[k]; w != nil && !bad[w.rs.LedgerKey] {
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

// unassignAll stops fetching everything.
func (p *pipeline) unassignAll() {
	p.mu.Lock()
	var parts []kafka.TopicPartition
	for t := range p.mu.assigned {
		topic := t.Topic
		parts = append(parts, kafka.TopicPartition{Topic: &topic, Partition: t.Partition})
	}
	p.mu.assigned = make(map[tp]bool)
	p.mu.Unlock()
	if len(parts) > 0 {
		_ = p.kc.Resume(parts) // the flag outlives the assignment (see reconcile)
		if err := p.kc.IncrementalUnassign(parts); err != nil {
			p.log.Debug("unassign", "error", err)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
