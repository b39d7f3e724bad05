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

	"github.com/keyshare/keyshare/internal/textsafe"
)

// A parked key's copies are pipelined: a keyParker writes them in the
// key's order with up to parkWindow on their way at once, and finishes
// each record once the broker has acknowledged its copy. The producer is
// idempotent, so the broker takes the copies in the order they were
// written, and with gapless delivery on (enable.gapless.guarantee) a
// copy that fails makes every later one of the producer fail too, rather
// than land in front of the failed one when it is written again. The
// parker then writes the failed copies again from the first, one at a
// time until one is acknowledged, after the record's backoff, on a new
// producer if the old one stopped; a copy is never counted done before
// its acknowledgement. Each parker has its own producer, made when the
// key's first copy is written and closed once the key has had none to
// write for parkerLinger, so that one key's failure stops no other key's
// copies.

// parkWindow is how many of a key's copies a parker keeps on their way to
// the broker at once.
const parkWindow = 256

// parkerLinger is how long a parker with nothing to write waits for the
// key's next record before it closes its producer and ends: a parked key
// on a live stream keeps one producer, not one per record.
const parkerLinger = 10 * time.Second

// keyParker is a parked key's queue of records to copy (under p.mu), and
// a poke for its parker when one is queued.
type keyParker struct {
	k     jobKey
	queue []*job
	// taken counts the records its parker has taken from queue and not
	// yet finished or put back: with queue, what the key still has to
	// park (copiesPendingLocked).
	taken int
	wake  chan struct{}
}

// copiesPendingLocked reports whether key k has records queued to be
// parked, or copies on their way: a record of the key handled otherwise
// (its park ended meanwhile) or an unpark's prelude must wait for them,
// or it would run before the key's earlier records, or read the parking
// partition without them (waitParkedCopies).
func (p *pipeline) copiesPendingLocked(k jobKey) bool {
	kp := p.mu.parkers[k]
	return kp != nil && (len(kp.queue) > 0 || kp.taken > 0)
}

// waitParkedCopies waits until key k has no record queued to be parked
// nor copy on its way, or ctx ends. The caller must not hold the key's
// lock, which the parker needs.
func (p *pipeline) waitParkedCopies(ctx context.Context, k jobKey) error {
	if p.parkers.Load() == 0 {
		return nil // the common case: no key parked, no lock taken
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.copiesPendingLocked(k) {
		return nil
	}
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.mu.cond.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	for p.copiesPendingLocked(k) && ctx.Err() == nil {
		p.mu.cond.Wait()
	}
	return ctx.Err()
}

// settledLocked counts n records the parker had taken as finished or put
// back, and wakes those waiting for the key's copies.
func (kp *keyParker) settledLocked(p *pipeline, n int) {
	kp.taken -= n
	p.mu.cond.Broadcast()
}

// errParkQueued: the record was handed to its key's parker, which
// finishes it (process, runJob).
var errParkQueued = errors.New("consumer: the record is queued to be parked")

// parkLater queues j's record to be copied to its key's parking topic
// behind the key's earlier copies, starting the key's parker if none
// runs. The parker finishes the record.
func (p *pipeline) parkLater(j *job) {
	p.mu.Lock()
	defer p.mu.Unlock()
	kp := p.mu.parkers[j.key]
	if kp == nil {
		if p.mu.parkers == nil {
			p.mu.parkers = make(map[jobKey]*keyParker)
		}
		kp = &keyParker{k: j.key, wake: make(chan struct{}, 1)}
		p.mu.parkers[j.key] = kp
		p.parkers.Add(1)
		p.goFunc(func() {
			defer p.parkers.Add(-1)
			p.runParker(kp)
		})
	}
	kp.queue = append(kp.queue, j)
	poke(kp.wake)
}

// runParker writes kp's copies until it has none left, under the key's
// lock: an unpark's prelude (prelude.go) reads the parking partition to
// its end under the same lock, so no copy lands behind it.
func (p *pipeline) runParker(kp *keyParker) {
	p.mu.Lock()
	lock := p.keyLockLocked(kp.k)
	p.mu.Unlock()
	lock.Lock()
	w := &parkWriter{p: p, kp: kp, lock: lock, window: parkWindow, backoff: p.c.cfg.Retry.Backoff, acks: make(chan kafka.Event, parkWindow)}
	for w.step() {
	}
	if w.lock != nil {
		lock.Unlock()
	}
	// Closed after the key's lock is released: closing can take a while,
	// and the key's next parker, or its prelude, need not wait for it.
	w.closeProducer()
}

// parkWriter is a running parker's state.
type parkWriter struct {
	p      *pipeline
	kp     *keyParker
	lock   *sync.Mutex // the key's lock (keyLockLocked), held but while idle
	pr     *kafka.Producer
	logs   chan struct{}
	acks   chan kafka.Event // the delivery reports of the copies flying
	flying []*job           // copies written, not yet reported, in order
	window int              // 1 after a failure, until a copy is acknowledged
	// backoff is the wait before the failed copies are written again;
	// logged says a failure since the last acknowledgement was logged.
	backoff time.Duration
	logged  bool
}

// step writes the queued copies the window allows and settles the
// oldest report. It reports whether the parker goes on.
func (w *parkWriter) step() bool {
	for len(w.flying) < w.window {
		j, more := w.take()
		if !more {
			break
		}
		if j == nil {
			continue // cancelled or given back
		}
		if err := w.write(j); err == errParkChanged {
			w.giveBack(j)
		} else if err != nil {
			w.retry([]*job{j}, err)
			return w.p.ctx.Err() == nil
		}
	}
	if len(w.flying) == 0 {
		return w.idle()
	}
	select {
	case ev := <-w.acks:
		w.settle(ev)
	case <-w.p.ctx.Done():
		return false
	}
	return true
}

// take pops the next record to copy: nil if it needs no copy (its range
// drained, or its key is not parked any more: then it is given back, with
// its key's later records), and more false when the queue is empty.
func (w *parkWriter) take() (j *job, more bool) {
	p := w.p
	p.mu.Lock()
	if len(w.kp.queue) == 0 {
		p.mu.Unlock()
		return nil, false
	}
	j = w.kp.queue[0]
	w.kp.queue = w.kp.queue[1:]
	w.kp.taken++ // in the same step as the pop: the key never looks done between them
	p.mu.Unlock()
	if j.ctx.Err() != nil {
		p.mu.Lock()
		w.kp.settledLocked(p, 1)
		p.mu.Unlock()
		return nil, true // abandoned: its finish is ignored
	}
	if _, ok := p.parkFor(j); !ok {
		w.giveBack(j)
		return nil, true
	}
	return j, true
}

// giveBack gives back j, whose key is not parked any more, and its key's
// later records (finish): they are fetched again and handled as the key's
// operation now says, after the copies on their way.
func (w *parkWriter) giveBack(j *job) {
	p := w.p
	p.finish(j, false)
	j.cancel()
	p.mu.Lock()
	w.kp.queue = nil // given back with j
	w.kp.settledLocked(p, 1)
	p.mu.Unlock()
}

// idle waits, with no copy on its way, for the key's next record, and
// ends the parker if none is queued within parkerLinger. It lets the
// key's lock go meanwhile: an unpark's prelude need not wait for it.
func (w *parkWriter) idle() bool {
	p := w.p
	t := time.NewTimer(parkerLinger)
	defer t.Stop()
	w.lock.Unlock()
	select {
	case <-w.kp.wake:
		w.lock.Lock()
		return true
	case <-p.ctx.Done():
		w.lock.Lock()
		return false
	case <-t.C:
	}
	p.mu.Lock()
	if len(w.kp.queue) > 0 {
		p.mu.Unlock()
		w.lock.Lock()
		return true
	}
	delete(p.mu.parkers, w.kp.k)
	p.mu.Unlock()
	// Ended: the key's lock is not taken again, as the key's next parker
	// may hold it already.
	w.lock = nil
	return false
}

// write sends j's copy, with the park set on its key now.
func (w *parkWriter) write(j *job) error {
	op, ok := w.p.parkFor(j)
	if !ok {
		return errParkChanged
	}
	if w.pr == nil {
		pr, logs, err := newParkingProducer(w.p.c.cfg.Kafka, w.p.c.log.Named("librdkafka").Named("parking"))
		if err != nil {
			return err
		}
		w.pr, w.logs = pr, logs
	}
	m := parkedCopy(op.Record.ParkTopic, j.m, w.p.fenceOf(j).Token)
	m.Opaque = j
	if err := w.pr.Produce(m, w.acks); err != nil {
		return err
	}
	w.flying = append(w.flying, j)
	return nil
}

// settle records the report ev of a copy: the record is done once its
// copy is acknowledged. A failure fails every copy after it (gapless
// delivery): their reports are awaited, and all are written again.
func (w *parkWriter) settle(ev kafka.Event) {
	j, err := w.reported(ev)
	if j == nil {
		return
	}
	if err == nil {
		w.p.finish(j, true)
		j.cancel()
		w.settled(1)
		w.window, w.backoff, w.logged = parkWindow, w.p.c.cfg.Retry.Backoff, false
		return
	}
	failed := []*job{j}
	for len(w.flying) > 0 {
		select {
		case ev := <-w.acks:
			if f, ferr := w.reported(ev); f != nil && ferr == nil {
				w.p.log.Error("a parked copy was acknowledged after an earlier one failed: the parking topic holds it ahead of that one", "topic", f.key.topic, "partition", f.key.partition, "offset", f.o)
				w.p.finish(f, true)
				f.cancel()
				w.settled(1)
			} else if f != nil {
				failed = append(failed, f)
			}
		case <-w.p.ctx.Done():
			return
		}
	}
	slices.SortFunc(failed, func(a, b *job) int { return cmp.Compare(a.o, b.o) })
	w.retry(failed, err)
}

// settled counts n of the records the parker took as finished.
func (w *parkWriter) settled(n int) {
	w.p.mu.Lock()
	w.kp.settledLocked(w.p, n)
	w.p.mu.Unlock()
}

// reported takes the record of report ev out of the copies flying.
func (w *parkWriter) reported(ev kafka.Event) (*job, error) {
	m, ok := ev.(*kafka.Message)
	if !ok {
		return nil, nil
	}
	j, _ := m.Opaque.(*job)
	i := slices.Index(w.flying, j)
	if i < 0 {
		return nil, nil
	}
	w.flying = slices.Delete(w.flying, i, i+1)
	return j, m.TopicPartition.Error
}

// retry puts failed, records whose copies failed with err (in order),
// back at the front of the queue, writes them again after the backoff,
// one at a time until one is acknowledged, and makes a new producer if
// the old one stopped.
func (w *parkWriter) retry(failed []*job, err error) {
	p := w.p
	// A producer stopped by a fatal error (gapless delivery's, after a
	// copy failed) is made again, once no copy of it is on its way:
	// their reports are awaited first.
	if len(w.flying) == 0 && w.pr != nil && w.pr.GetFatalError() != nil {
		w.closeProducer()
	}
	p.mu.Lock()
	w.kp.queue = append(failed, w.kp.queue...)
	w.kp.taken -= len(failed) // queued again: still pending, no wake
	p.mu.Unlock()
	log := p.log.Debug
	if !w.logged {
		log, w.logged = p.log.Error, true
	}
	j := failed[0]
	log("parking a record failed; writing it again (the key's records wait, other keys go on)", "topic", j.key.topic, "partition", j.key.partition,
		"offset", j.o, "records", len(failed), "error", textsafe.Escape(err.Error()))
	p.sleepOrKeyOp(p.ctx, w.backoff)
	w.backoff = min(2*max(w.backoff, time.Millisecond), p.c.cfg.Retry.MaxBackoff)
	w.window = 1
}

// closeProducer closes the parker's producer, if it has one.
func (w *parkWriter) closeProducer() {
	if w.pr == nil {
		return
	}
	w.pr.Close()
	<-w.logs
	w.pr, w.logs = nil, nil
}

// newParkingProducer makes a parker's producer from the consumer's Kafka
// settings, as the dead-letter producer's (acks=all, idempotent), with
// gapless delivery, and batches of any size: a copy too large for the
// parking topic fails its batch, and then the parker writes its copies
// one at a time until the large one is at the front and fails alone.
func newParkingProducer(user kafka.ConfigMap, log hclog.Logger) (*kafka.Producer, chan struct{}, error) {
	pm := ProducerConfig(user)
	pm["acks"] = "all"
	pm["enable.idempotence"] = true
	pm["enable.gapless.guarantee"] = true
	pm["go.logs.channel.enable"] = true
	pr, err := kafka.NewProducer(&pm)
	if err != nil {
		return nil, nil, fmt.Errorf("consumer: create the parking producer: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		forwardLogs(log, pr.Logs())
	}()
	return pr, done, nil
}
