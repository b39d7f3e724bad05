package schedule

import (
	"slices"
	"sync"
	"time"
)

// batching is a batch-mode scheduler's state: workers gather batches
// instead of taking one job.
type batching[K comparable, J any] struct {
	run     func(*Batch[K, J])
	max     int
	wait    time.Duration
	forming bool       // a worker is gathering a batch
	form    *sync.Cond // wakes the forming worker: a key is ready, or a held key got a job
}

// Batch is the jobs one worker takes at once, and the keys it holds
// (running) until it releases them.
type Batch[K comparable, J any] struct {
	s     *Scheduler[K, J]
	jobs  []J
	held  map[K]*keyQueue[K, J] // keys not released yet
	order []*keyQueue[K, J]     // keys taken, in the order taken
}

// NewBatching starts workers that gather batches of up to size jobs,
// waiting at most wait for more once a batch has one, and call run for
// each. run must release every key of the batch (Batch.Release); the keys
// it has not released when it returns are released without jobs put
// back.
func NewBatching[K comparable, J any](workers, size int, wait time.Duration, run func(*Batch[K, J])) *Scheduler[K, J] {
	s := &Scheduler[K, J]{keys: make(map[K]*keyQueue[K, J]), now: time.Now}
	s.cond = sync.NewCond(&s.mu)
	s.batching = &batching[K, J]{run: run, max: size, wait: wait, form: sync.NewCond(&s.mu)}
	for range workers {
		s.wg.Add(1)
		go s.workBatches()
	}
	return s
}

// MaxBatch is the most jobs a batch holds (0 in single mode).
func (s *Scheduler[K, J]) MaxBatch() int {
	if s.batching == nil {
		return 0
	}
	return s.batching.max
}

// Jobs are the batch's jobs: a key's jobs are consecutive jobs of that key
// in order; keys are interleaved in no particular order.
func (b *Batch[K, J]) Jobs() []J { return b.jobs }

// Keys are the keys the batch took, in the order taken.
func (b *Batch[K, J]) Keys() []K {
	out := make([]K, len(b.order))
	for i, q := range b.order {
		out[i] = q.key
	}
	return out
}

// workBatches is a batch-mode worker. One worker at a time gathers a batch
// (the others wait), so that a batch fills up rather than every idle worker
// taking a few jobs each.
func (s *Scheduler[K, J]) workBatches() {
	defer s.wg.Done()
	bm := s.batching
	s.mu.Lock()
	for {
		for (bm.forming || len(s.ready) == 0) && !s.closed {
			s.cond.Wait()
		}
		if s.closed {
			s.mu.Unlock()
			return
		}
		bm.forming = true
		b := s.formLocked()
		bm.forming = false
		if len(s.ready) > 0 {
			s.cond.Signal() // the next worker gathers the next batch
		}
		if s.closed {
			// Queued jobs are dropped on close (see Close); so is this
			// batch.
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()

		bm.run(b)

		s.mu.Lock()
		for _, q := range b.order {
			b.releaseLocked(q.key, nil)
		}
	}
}

// formLocked gathers a batch: ready keys' head jobs, up to the batch
// size, waiting up to the batch wait from the first job for more.
func (s *Scheduler[K, J]) formLocked() *Batch[K, J] {
	bm := s.batching
	b := &Batch[K, J]{s: s, held: make(map[K]*keyQueue[K, J])}
	var deadline time.Time
	var timer *time.Timer
	for {
		s.takeLocked(b)
		if len(b.jobs) >= bm.max || s.closed || bm.wait <= 0 {
			break
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(bm.wait)
			timer = time.AfterFunc(bm.wait, func() {
				s.mu.Lock()
				bm.form.Broadcast()
				s.mu.Unlock()
			})
		} else if !time.Now().Before(deadline) {
			break
		}
		bm.form.Wait()
	}
	if timer != nil {
		timer.Stop()
	}
	return b
}

// TakeBatch takes a batch as a worker does, without waiting for more jobs;
// it is empty if no key is ready. For a batch-mode scheduler without
// workers.
func (s *Scheduler[K, J]) TakeBatch() *Batch[K, J] {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := &Batch[K, J]{s: s, held: make(map[K]*keyQueue[K, J])}
	s.takeLocked(b)
	return b
}

// takeLocked adds jobs to b until it is full: first new jobs of keys b
// holds already (they come after that key's jobs in b), then ready keys,
// each with as many of its consecutive jobs as fit.
func (s *Scheduler[K, J]) takeLocked(b *Batch[K, J]) {
	room := s.batching.max - len(b.jobs)
	take := func(q *keyQueue[K, J]) {
		for room > 0 && len(q.jobs) > 0 {
			b.jobs = append(b.jobs, q.pop())
			q.lastTake = s.now()
			room--
		}
	}
	for _, q := range b.order {
		take(q)
	}
	for room > 0 && len(s.ready) > 0 {
		q := s.popReadyLocked()
		b.held[q.key] = q
		b.order = append(b.order, q)
		take(q)
	}
}

// Release ends b's hold of key: putBack (jobs of the key taken into b but
// not finished, in order) go back to the front of its queue, and the key
// is ready again if it has jobs. Releasing a key twice does nothing.
func (b *Batch[K, J]) Release(key K, putBack []J) {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	b.releaseLocked(key, putBack)
}

func (b *Batch[K, J]) releaseLocked(key K, putBack []J) {
	s := b.s
	q := b.held[key]
	if q == nil {
		return // released already
	}
	delete(b.held, key)
	if len(putBack) > 0 {
		q.jobs = slices.Concat(putBack, q.jobs)
	}
	q.running = false
	if len(q.jobs) > 0 {
		q.queued = true
		s.ready = append(s.ready, q)
		s.signalLocked()
		return
	}
	delete(s.keys, q.key)
}
