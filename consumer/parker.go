package consumer

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/keyshare/keyshare/consumer/internal/keyops"
)

// A parked key's copies are pipelined by a parker: a goroutine per key
// that writes the key's queued records with keyops.ParkWriter (the
// window, the order through a failure, the backoff), each record done at
// its copy's acknowledgement. Each parker has its own producer, made when
// the key's first copy is written and closed once the key has had none to
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

// runParker writes kp's copies (keyops.ParkWriter) until it has none
// left, under the key's lock: an unpark's prelude (prelude.go) reads the
// parking partition to its end under the same lock, so no copy lands
// behind it.
func (p *pipeline) runParker(kp *keyParker) {
	p.mu.Lock()
	lock := p.keyLockLocked(kp.k)
	p.mu.Unlock()
	lock.Lock()
	q := &parkQueue{p: p, kp: kp}
	var w copyWriter = keyops.NewParkWriter[*job](p.ctx, q, keyops.ParkWriterConfig{
		Window: parkWindow, Backoff: p.c.cfg.Retry.Backoff, MaxBackoff: p.c.cfg.Retry.MaxBackoff, Log: p.log,
	})
	held := true
	for {
		step := w.Step()
		if step == keyops.StepIdle {
			var goOn bool
			if goOn, held = p.parkerIdle(kp, lock); goOn {
				continue
			}
		}
		if step != keyops.StepOn {
			break
		}
	}
	if held {
		lock.Unlock()
	}
	// Closed after the key's lock is released: closing can take a while,
	// and the key's next parker, or its prelude, need not wait for it.
	w.Close()
}

// parkerIdle waits, with no copy on its way, for the key's next record,
// and ends the parker if none is queued within parkerLinger. It lets the
// key's lock go meanwhile: an unpark's prelude need not wait for it. It
// reports whether the parker goes on, and whether it holds the lock
// again: a parker ended by the member's stop does, one that has ended for
// want of records does not, as the key's next parker may hold it already.
func (p *pipeline) parkerIdle(kp *keyParker, lock *sync.Mutex) (goOn, held bool) {
	t := time.NewTimer(parkerLinger)
	defer t.Stop()
	lock.Unlock()
	select {
	case <-kp.wake:
		lock.Lock()
		return true, true
	case <-p.ctx.Done():
		lock.Lock()
		return false, true
	case <-t.C:
	}
	p.mu.Lock()
	if len(kp.queue) > 0 {
		p.mu.Unlock()
		lock.Lock()
		return true, true
	}
	delete(p.mu.parkers, kp.k)
	p.mu.Unlock()
	return false, false
}
