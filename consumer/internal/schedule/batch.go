package schedule

import (
	"slices"
	"sync"
	"time"
)

// Batcher runs jobs of type J in batches on a fixed number of workers: a
// worker gathers the head jobs of several ready keys, as many consecutive
// jobs of each as fit, into a Batch, and holds those keys until it
// releases them. Each key's jobs run in order and no key is in two batches
// at once.
//
// It shares its key queues with Scheduler (the same order, the same
// blocked keys) and differs in what a worker takes: a Scheduler's worker
// takes one job and gives its key back when the job ends; a Batcher's
// takes many, keeps taking jobs of the keys it holds while it gathers, and
// gives each key back on its own.
type Batcher[K Key, J any] struct {
	queues[K, J]
	cond    *sync.Cond // wakes an idle worker: a key is ready, or closing
	form    *sync.Cond // wakes the gathering worker: a key is ready, or a held key got a job
	forming bool       // a worker is gathering a batch
	closed  bool
	run     func(*Batch[K, J])
	max     int
	wait    time.Duration
	wg      sync.WaitGroup
}

// Batch is the jobs one worker takes at once, and the keys it holds
// (running) until it releases them.
type Batch[K Key, J any] struct {
	s     *Batcher[K, J]
	jobs  []J
	held  map[K]*keyQueue[K, J] // keys not released yet
	order []*keyQueue[K, J]     // keys taken, in the order taken
}

// NewBatcher starts workers that gather batches of up to size jobs,
// waiting at most wait for more once a batch has one, and call run for
// each. run must release every key of the batch (Batch.Release); the keys
// it has not released when it returns are released without jobs put
// back.
func NewBatcher[K Key, J any](workers, size int, wait time.Duration, run func(*Batch[K, J])) *Batcher[K, J] {
	s := &Batcher[K, J]{queues: newQueues[K, J](), run: run, max: size, wait: wait}
	s.cond = sync.NewCond(&s.mu)
	s.form = sync.NewCond(&s.mu)
	for range workers {
		s.wg.Add(1)
		go s.work()
	}
	return s
}

// MaxBatch is the most jobs a batch holds.
func (s *Batcher[K, J]) MaxBatch() int { return s.max }

// Submit queues j behind earlier jobs of key k.
func (s *Batcher[K, J]) Submit(k K, j J) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.submitLocked(k, j, 0, s.now())
}

// SubmitAll queues jobs[i] behind the earlier jobs of key keys[i], in
// order, and sets queued[i]; jobs[i] arrived at at (the caller's reading
// of the scheduler's clock: a key's queue made or revived by it counts
// from then). A key blocked (blocked.go) with keep jobs queued already
// (keep > 0) takes no more: queued[i] is false. One hold of the lock for
// all of them: the consumer submits a burst of records at once, and a
// hold per record met the workers at the lock for every one.
func (s *Batcher[K, J]) SubmitAll(keys []K, jobs []J, keep int, at time.Time, queued []bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range jobs {
		queued[i] = s.submitLocked(keys[i], jobs[i], keep, at)
	}
}

func (s *Batcher[K, J]) submitLocked(k K, j J, keep int, at time.Time) bool {
	q, ready := s.enqueueLocked(k, j, keep, at)
	switch {
	case q == nil:
		return false
	case ready:
		s.signalLocked()
	case q.running && s.forming:
		s.form.Signal() // the forming batch may hold q: it takes the job
	}
	return true
}

// signalLocked wakes a worker for a newly ready key: the worker gathering
// a batch if there is one, else an idle worker.
func (s *Batcher[K, J]) signalLocked() {
	if s.forming {
		s.form.Signal()
		return
	}
	s.cond.Signal()
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

// work is a worker. One worker at a time gathers a batch (the others
// wait), so that a batch fills up rather than every idle worker taking a
// few jobs each.
func (s *Batcher[K, J]) work() {
	defer s.wg.Done()
	s.mu.Lock()
	for {
		for (s.forming || s.ready.len() == 0) && !s.closed {
			s.cond.Wait()
		}
		if s.closed {
			s.mu.Unlock()
			return
		}
		s.forming = true
		b := s.formLocked()
		s.forming = false
		if s.ready.len() > 0 {
			s.cond.Signal() // the next worker gathers the next batch
		}
		if s.closed {
			// Queued jobs are dropped on close (see Close); so is this
			// batch.
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()

		s.run(b)

		s.mu.Lock()
		for _, q := range b.order {
			b.releaseLocked(q.key, nil)
		}
	}
}

// formLocked gathers a batch: ready keys' head jobs, up to the batch
// size, waiting up to the batch wait from the first job for more.
func (s *Batcher[K, J]) formLocked() *Batch[K, J] {
	b := s.newBatch()
	var deadline time.Time
	var timer *time.Timer
	for {
		s.fillLocked(b)
		if len(b.jobs) >= s.max || s.closed || s.wait <= 0 {
			break
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(s.wait)
			timer = time.AfterFunc(s.wait, func() {
				s.mu.Lock()
				s.form.Broadcast()
				s.mu.Unlock()
			})
		} else if !time.Now().Before(deadline) {
			break
		}
		s.form.Wait()
	}
	if timer != nil {
		timer.Stop()
	}
	return b
}

func (s *Batcher[K, J]) newBatch() *Batch[K, J] {
	return &Batch[K, J]{s: s, held: make(map[K]*keyQueue[K, J])}
}

// TakeBatch takes a batch as a worker does, without waiting for more jobs;
// it is empty if no key is ready. For a Batcher without workers.
func (s *Batcher[K, J]) TakeBatch() *Batch[K, J] {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.newBatch()
	s.fillLocked(b)
	return b
}

// fillLocked adds jobs to b until it is full: first new jobs of keys b
// holds already (they come after that key's jobs in b), then ready keys,
// each with as many of its consecutive jobs as fit. The jobs are taken
// under one hold of the lock: one clock reading serves them all.
func (s *Batcher[K, J]) fillLocked(b *Batch[K, J]) {
	room := s.max - len(b.jobs)
	now := s.now()
	take := func(q *keyQueue[K, J]) {
		for room > 0 && len(q.jobs) > 0 {
			b.jobs = append(b.jobs, s.takeLocked(q, now))
			room--
		}
	}
	for _, q := range b.order {
		take(q)
	}
	for room > 0 && s.ready.len() > 0 {
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
	q := b.held[key]
	if q == nil {
		return // released already
	}
	delete(b.held, key)
	if len(putBack) > 0 {
		q.jobs = slices.Concat(putBack, q.jobs)
	}
	if b.s.requeueLocked(q) {
		b.s.signalLocked()
	}
}

// Close stops the workers after the batches they are running; queued jobs
// are dropped, and so is a batch being gathered.
func (s *Batcher[K, J]) Close() {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.form.Broadcast()
	s.mu.Unlock()
	s.wg.Wait()
}
