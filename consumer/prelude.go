package consumer

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/keyshare/keyshare/consumer/internal/keyops"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// The prelude of an unparked key (keyshare key unpark; state.KeyOpUnpark):
// before the key's next live record, its owner handles the key's records
// parked in the parking topic, in their order, reading the parking
// partition from the operation's progress (Next) to its end and passing
// over the records of other keys or origins. After each record it handles
// it writes the progress, guarded by its ownership of the key's range, so
// a range moved mid-way resumes at the new owner from there (the record
// being handled at the move may run twice, as any record on a crash;
// none is lost, none runs out of order). Reaching the partition's end, it
// deletes the operation in a transaction under the same guard; the key's
// live records then run. Parks of this member are acknowledged before
// their records count done, and a park re-checks the operation under the
// key's lock (park.go), so no record of the key is parked behind the
// prelude's back.
//
// The prelude runs on the worker that holds the key's next live record,
// or, for a key with none, on a goroutine of its own (watchKeyOps); the
// key's lock keeps the two apart, and the range's drain waits for it as
// for a record in flight.

// errNotOwner: the member no longer owns the key's range (or is handing
// it over); the prelude stops, and the range's next owner resumes it.
var errNotOwner = errors.New("consumer: the key's range is not this member's to work on")

// preludeRun is a prelude running; cancel stops it (its range's drain
// budget is spent: the next owner runs the key's prelude).
type preludeRun struct {
	cancel context.CancelFunc
	key    []byte
	op     string // state.KeyOpUnpark or state.KeyOpReplay
	// failing is the record the prelude is retrying, nil while none has
	// failed: the key's stuck record for Status and the stuck report
	// (stuck.go), since the key's live record waits behind it. Guarded
	// by the pipeline's mu.
	failing *preludeFailure
}

// keyLockLocked is the lock that keeps a key's prelude and its parks
// apart.
func (p *pipeline) keyLockLocked(k jobKey) *sync.Mutex {
	if p.mu.keyLocks == nil {
		p.mu.keyLocks = make(map[jobKey]*sync.Mutex)
	}
	l := p.mu.keyLocks[k]
	if l == nil {
		l = new(sync.Mutex)
		p.mu.keyLocks[k] = l
	}
	return l
}

// preludeSet reports whether an unpark or a replay is set on the key.
// preludeFirst asks before it takes the key's lock: every record asks,
// and a lock kept per key ever seen would grow with the keys. Nearly
// always the member holds no key operation at all, which HasKeyOps
// answers without KeyOp's copy of an empty operation (coord/keyops.go).
func (p *pipeline) preludeSet(t tp, key []byte) bool {
	if !p.sess.HasKeyOps() {
		return false
	}
	op, ok := p.sess.KeyOp(t.Topic, t.Partition, key)
	return ok && runsPrelude(op)
}

// runsPrelude reports whether op has its key's owner run a prelude: an
// unpark or a replay that no member has refused.
func runsPrelude(op coord.KeyOp) bool {
	r := op.Record
	return (r.Op == schema.KeyOpUnpark || r.Op == schema.KeyOpReplay) && r.Refused == ""
}

// workingRangeLocked is the range of t holding hash h that this member
// works on (owned, not revoking), or nil.
func (p *pipeline) workingRangeLocked(t tp, h uint32) *owned {
	for _, w := range p.mu.byTP[t] {
		if !w.revoking && w.st.Range().Contains(h) {
			return w
		}
	}
	return nil
}

// preludeFirst runs the prelude of the key of (t, key) if it is unparked
// or replayed, until it is done or cannot go on here; live is the offset
// of the key's live record about to run, or -1 (watchKeyOps). It returns
// nil once the key has no prelude left (its live records may run),
// errNotOwner or ctx's error.
func (p *pipeline) preludeFirst(ctx context.Context, t tp, key []byte, live int64) error {
	if p == nil || p.sess == nil || key == nil || !p.preludeSet(t, key) {
		return nil // the common case: no key lock taken, none kept for the key
	}
	k := keyedJobKey(t, key)
	// The key's copies still on their way to the parking partition land
	// before the prelude reads it (parker.go); their parker needs the
	// key's lock, so they are waited for before it is taken.
	if err := p.waitParkedCopies(ctx, k); err != nil {
		return err
	}
	p.mu.Lock()
	lock := p.keyLockLocked(k)
	p.mu.Unlock()
	lock.Lock()
	defer lock.Unlock()
	for ctx.Err() == nil {
		op, ok := p.sess.KeyOp(t.Topic, t.Partition, key)
		if !ok || !runsPrelude(op) {
			return nil
		}
		p.mu.Lock()
		stale := op.Rev < p.mu.keyOpWritten[op.Name]
		p.mu.Unlock()
		if !stale {
			err := p.prelude(ctx, t, key, op, live)
			if err == nil || errors.Is(err, errNotOwner) || ctx.Err() != nil {
				return err
			}
			p.log.Warn("key prelude interrupted; trying again", "topic", t.Topic, "partition", t.Partition, "key", textsafe.Bytes(key), "error", err)
		}
		// Our own write is not in the watch's copy yet, or the
		// operation changed: look again once it has.
		p.sleepOrKeyOp(ctx, time.Second)
	}
	return ctx.Err()
}

// prelude handles op's records of key from op.Record.Next to the parking
// partition's end (an unpark) or, for a replay, to ReplayTo or the key's
// first record the ledger does not count handled, whichever comes first
// (the key's next live record), then deletes op.
func (p *pipeline) prelude(ctx context.Context, t tp, key []byte, op coord.KeyOp, live int64) error {
	h := ledger.Hash(key, 0)
	k := keyedJobKey(t, key)
	p.mu.Lock()
	w := p.workingRangeLocked(t, h)
	replayTo := op.Record.ReplayTo
	if w != nil && op.Record.Op == schema.KeyOpReplay && replayTo == 0 {
		pos, known := p.mu.pos[t]
		// Records the range's ledger counts handled above the fetch
		// position (done by a previous owner, not fetched again yet) are
		// the key's too: the bound reaches past them, and the loop below
		// stops at the key's first record not handled.
		pos = max(pos, ledgerNext(w, h))
		var ok bool
		if replayTo, ok = keyops.ReplayBound(live, p.keyDispatchedLocked(t, k), pos, known, op.Record.Next); !ok {
			p.mu.Unlock()
			return nil // its live record's worker runs the replay
		}
	}
	if w == nil {
		p.mu.Unlock()
		return errNotOwner
	}
	// Kept by hash, not by range: a split or handoff replaces the range,
	// and the drain of the part holding the key must wait for the record
	// the prelude is handling, or cancel it before the release.
	ctx, cancel := context.WithCancel(ctx)
	run := &preludeRun{cancel: cancel, key: key, op: op.Record.Op}
	if p.mu.preludes[t] == nil {
		p.mu.preludes[t] = make(map[*preludeRun]uint32)
	}
	p.mu.preludes[t][run] = h
	p.mu.Unlock()
	defer func() {
		cancel()
		p.mu.Lock()
		delete(p.mu.preludes[t], run)
		p.mu.cond.Broadcast() // a drain may wait for it
		p.mu.Unlock()
	}()
	// still reports the range holding the key as it stands now, and
	// whether this member may start a record of it (not revoking): a
	// record handled while its range was being revoked is recorded under
	// the revoking range's record, as a drain's flush is.
	still := func() (schema.RangeState, bool) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if w := holding(p.mu.byTP, t, h); w != nil {
			return w.rs, !w.revoking
		}
		return schema.RangeState{}, false
	}
	// owned is still's range while this member owns it, revoking or not.
	owned := func() (schema.RangeState, bool) {
		rs, _ := still()
		return rs, rs.Key != ""
	}
	op, ok, err := p.freshPreludeOp(ctx, t, key, op, replayTo, still)
	if !ok || err != nil {
		return err
	}
	return p.readPrelude(ctx, preludeRead{t: t, key: key, h: h, run: run, still: still, owned: owned}, op)
}

// freshPreludeOp is op as etcd holds it now, with a replay's bound
// (replayTo, as the prelude found it) written into it if it has none yet;
// ok is false, with no error, when the operation is done or refused
// meanwhile.
func (p *pipeline) freshPreludeOp(ctx context.Context, t tp, key []byte, op coord.KeyOp, replayTo int64, still func() (schema.RangeState, bool)) (_ coord.KeyOp, ok bool, err error) {
	// The operation as etcd holds it now: the watch's copy may lag behind
	// the progress the range's previous owner wrote last, and records
	// below it would run twice.
	rctx, cancel := context.WithTimeout(ctx, p.c.cfg.EtcdTimeout)
	fresh, found, err := p.sess.ReadKeyOp(rctx, t.Topic, t.Partition, key)
	cancel()
	switch {
	case err != nil:
		return op, false, err
	case !found:
		return op, false, nil // done meanwhile
	case fresh.Record.Refused != "":
		return op, false, nil // refused meanwhile (refuseReplay): the live records go on
	case fresh.Err != nil || fresh.Record.Op != op.Record.Op:
		return op, false, coord.ErrKeyOpChanged // preludeFirst looks again once the watch has it
	}
	op = fresh
	if op.Record.Op == schema.KeyOpReplay && op.Record.ReplayTo == 0 {
		replayTo = max(replayTo, op.Record.Next)
	}
	if r := op.Record; r.Op == schema.KeyOpReplay && r.ReplayTo == 0 {
		rs, ok := still()
		if !ok {
			return op, false, errNotOwner
		}
		rec := r
		rec.ReplayTo = replayTo
		var err error
		if op, err = p.sess.AdvanceKeyOp(ctx, op, rec, rs); err != nil {
			return op, false, err
		}
		p.mu.Lock()
		p.mu.keyOpWritten[op.Name] = op.Rev
		p.mu.Unlock()
	}
	return op, true, nil
}

// preludeRead is a running prelude's key and range, for its read loop.
type preludeRead struct {
	t   tp
	key []byte
	h   uint32 // the key's hash
	run *preludeRun
	// still reports the range holding the key as it stands now, and
	// whether this member may start a record of it; owned reports it
	// while this member owns it, revoking or not (prelude).
	still, owned func() (schema.RangeState, bool)
}

// readPrelude reads op's records (the parking partition's, or a replay's
// origin) from its progress, handles the key's, writing the progress
// after each, and deletes op at the end, the replay's bound, or the key's
// next live record.
func (p *pipeline) readPrelude(ctx context.Context, pr preludeRead, op coord.KeyOp) error {
	t, key, h, still := pr.t, pr.key, pr.h, pr.still
	r := op.Record
	source, stop, what := r.ParkTopic, int64(-1), "unparking a key: handling its parked records first"
	if r.Op == schema.KeyOpReplay {
		source, stop, what = t.Topic, r.ReplayTo, "replaying a key: handling its records again before its next live one"
	}
	rd, err := p.c.openPreludeReader(p.log.With("key", textsafe.Bytes(key), "operation", r.Op, "for_topic", t.Topic), source, t.Partition, r.Next, stop)
	if err != nil {
		return err
	}
	defer rd.Close()
	p.log.Info(what, "topic", t.Topic, "partition", t.Partition, "key", textsafe.Bytes(key), "from_topic", source, "from", r.Next, "to", stop)
	handled := 0
	// An unpark's copies are handled in the order of their fencing
	// tokens: one written late by a member that had lost the range is
	// passed over (keyops.CopyOrder).
	order := keyops.NewCopyOrder()
	for {
		m, err := rd.Next(ctx)
		if deleted := (*keyops.RecordsDeletedError)(nil); errors.As(err, &deleted) {
			return p.refuseReplay(ctx, op, deleted)
		}
		if err != nil {
			return err
		}
		rs, ok := still()
		if !ok {
			return errNotOwner
		}
		// mine: a record of the operation's key (ParkedOf gives a parked
		// one its origin's place).
		mine := m != nil && (r.Op == schema.KeyOpUnpark && keyops.ParkedOf(m, t.Topic, t.Partition, key) || r.Op == schema.KeyOpReplay && m.Key != nil && string(m.Key) == string(key))
		if m == nil || mine && r.Op == schema.KeyOpReplay && !p.handledHere(t, h, int64(m.TopicPartition.Offset)) {
			// The end of the parking partition, of the replay's bound, or
			// the key's next live record.
			rev, err := p.sess.FinishKeyOp(ctx, op, rs)
			if err != nil {
				return err
			}
			p.mu.Lock()
			p.mu.keyOpWritten[op.Name] = rev
			p.mu.Unlock()
			p.log.Info("key's "+r.Op+" done; its live records go on", "topic", t.Topic, "partition", t.Partition,
				"key", textsafe.Bytes(key), "handled", handled, "from_topic", source, "up_to", rd.Pos())
			return nil
		}
		if !mine {
			continue
		}
		if token, ok := keyops.ParkedFence(m); ok && r.Op == schema.KeyOpUnpark {
			if !order.Admit(token) {
				p.log.Warn("passing over a parked copy written late by a member that had lost the key's range", "topic", t.Topic,
					"partition", t.Partition, "key", textsafe.Bytes(key), "offset", int64(m.TopicPartition.Offset), "fence", token, "newest_fence", order.Newest())
				continue
			}
		}
		if err := p.handleAlone(ctx, t, m, h, pr.run); err != nil {
			return err
		}
		handled++
		rec := op.Record
		rec.Next = rd.Pos()
		if op, err = p.advance(ctx, op, rec, pr.owned); err != nil {
			return err
		}
		p.mu.Lock()
		p.mu.keyOpWritten[op.Name] = op.Rev
		p.mu.Unlock()
	}
}

// refuseReplay records on op, a replay, that the records it was to read
// were deleted, and logs it: the replay stops there, and the key's live
// records go on; the operation stays, refused, for an operator to see
// (keyshare key describe) and cancel.
func (p *pipeline) refuseReplay(ctx context.Context, op coord.KeyOp, deleted *keyops.RecordsDeletedError) error {
	p.log.Error("a replay's records were deleted before it read them; the replay is refused, the key's live records go on",
		"topic", deleted.Topic, "partition", deleted.Partition, "key", textsafe.Bytes(op.Record.Key), "deleted_from", deleted.From, "log_start", deleted.UpTo)
	rctx, cancel := context.WithTimeout(ctx, p.c.cfg.EtcdTimeout)
	defer cancel()
	return p.sess.RefuseKeyOp(rctx, op, deleted.Error())
}

// ledgerNext is the offset from which range w's ledger has seen no record
// with hash h (its segment's Next).
func ledgerNext(w *owned, h uint32) int64 {
	for _, s := range w.st.Entry().Segments {
		if s.Range().Contains(h) {
			return s.Next
		}
	}
	return 0
}

// handledHere reports whether the ledger of the range of t this member
// works on counts the record at o with hash h handled.
func (p *pipeline) handledHere(t tp, h uint32, o int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.workingRangeLocked(t, h)
	return w != nil && doneIn(w.st.Entry(), o, h)
}

// startPreludeLocked runs op's prelude on a goroutine of its own when this
// member works on the key's range and none runs yet: a key with no live
// record to run it before is unparked (or replayed) all the same.
func (p *pipeline) startPreludeLocked(op coord.KeyOp) {
	r := op.Record
	t := tp{Topic: r.Topic, Partition: r.Partition}
	k := keyedJobKey(t, r.Key)
	if !runsPrelude(op) || p.mu.preludeKeys[k] || p.workingRangeLocked(t, uint32(r.Hash)) == nil || r.Op == schema.KeyOpReplay && p.keyDispatchedLocked(t, k) {
		return
	}
	p.mu.preludeKeys[k] = true
	p.goFunc(func() {
		defer func() {
			p.mu.Lock()
			delete(p.mu.preludeKeys, k)
			p.mu.Unlock()
		}()
		if err := p.preludeFirst(p.ctx, t, r.Key, -1); err != nil && p.ctx.Err() == nil && !errors.Is(err, errNotOwner) {
			p.log.Warn("key prelude", "topic", t.Topic, "partition", t.Partition, "key", textsafe.Bytes(r.Key), "error", err)
		}
	})
}

// keyDispatchedLocked reports whether a record of key k of t is queued,
// running or shelved here: its worker runs the key's prelude first.
func (p *pipeline) keyDispatchedLocked(t tp, k jobKey) bool {
	for j := range p.mu.jobsOf(t) {
		if j.key == k {
			return true
		}
	}
	return p.shelvedLocked(t, k)
}

// advance writes rec, a prelude's progress, over op under the range
// holding the key as owned reports it. A revoke rewrites the range record
// while a record is being handled (the drain waits for it), and this
// member learns of the new record a moment after etcd has it: a write
// fenced by it is tried again under the range as owned reports it next,
// for as long as the member owns the range, up to the etcd timeout, so
// that the record just handled is not run again by the next owner.
func (p *pipeline) advance(ctx context.Context, op coord.KeyOp, rec schema.KeyOpRecord, owned func() (schema.RangeState, bool)) (coord.KeyOp, error) {
	deadline := time.Now().Add(p.c.cfg.EtcdTimeout)
	for {
		rs, ok := owned()
		if !ok {
			return coord.KeyOp{}, errNotOwner
		}
		next, err := p.sess.AdvanceKeyOp(ctx, op, rec, rs)
		if err == nil {
			return next, nil
		}
		if !errors.Is(err, coord.ErrKeyOpChanged) || time.Now().After(deadline) {
			return coord.KeyOp{}, err
		}
		sleep(ctx, 20*time.Millisecond)
		if ctx.Err() != nil {
			return coord.KeyOp{}, ctx.Err()
		}
	}
}
