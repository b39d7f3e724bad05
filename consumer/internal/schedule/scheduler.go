package schedule

import (
	"sync"
	"time"
)

// keyQueue holds one key's jobs in submission order.
type keyQueue[K comparable, J any] struct {
	key      K
	jobs     []J       // queued, oldest first
	running  bool      // a worker is on this key
	queued   bool      // the key is in the ready list
	lastTake time.Time // when a worker last took a job of the key (or the queue was made)
}

// Scheduler runs jobs of type J on a fixed number of workers, keeping each
// key's jobs in order and never two of one key at once. Keys take turns: a
// worker runs one job of a key, then puts the key at the back of the ready
// list, so a key with many jobs does not starve the others.
type Scheduler[K comparable, J any] struct {
	mu     sync.Mutex
	cond   *sync.Cond
	keys   map[K]*keyQueue[K, J]
	ready  []*keyQueue[K, J]
	closed bool
	run    func(J)
	wg     sync.WaitGroup
	// now is the clock that says when a key counts as blocked
	// (blocked.go): time.Now, or a test's.
	now func() time.Time
	// batching is batch mode's state (batch.go); nil in single mode.
	batching *batching[K, J]
}

// New starts workers that call run for each job.
func New[K comparable, J any](workers int, run func(J)) *Scheduler[K, J] {
	s := &Scheduler[K, J]{keys: make(map[K]*keyQueue[K, J]), run: run, now: time.Now}
	s.cond = sync.NewCond(&s.mu)
	for range workers {
		s.wg.Add(1)
		go s.work()
	}
	return s
}

// SetClock replaces the clock that says when a key counts as blocked
// (time.Now by default). Set it before the first Submit.
func (s *Scheduler[K, J]) SetClock(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
}

// Now reads the scheduler's clock.
func (s *Scheduler[K, J]) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now()
}

// Submit queues j behind earlier jobs of key k.
func (s *Scheduler[K, J]) Submit(k K, j J) { s.SubmitBounded(k, j, 0) }

// SubmitBounded is Submit, unless k is blocked (blocked.go) with keep jobs
// queued already (keep > 0): then j is not queued and the result is false.
// One lock for both, as it runs for every record.
func (s *Scheduler[K, J]) SubmitBounded(k K, j J, keep int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.submitLocked(k, j, keep)
}

func (s *Scheduler[K, J]) submitLocked(k K, j J, keep int) bool {
	q := s.keys[k]
	if q == nil {
		q = &keyQueue[K, J]{key: k, lastTake: s.now()}
		s.keys[k] = q
	} else if keep > 0 && len(q.jobs) >= keep && s.now().Sub(q.lastTake) >= BlockedAfter {
		return false
	}
	q.jobs = append(q.jobs, j)
	switch {
	case !q.running && !q.queued:
		q.queued = true
		s.ready = append(s.ready, q)
		s.signalLocked()
	case q.running && s.batching != nil && s.batching.forming:
		s.batching.form.Signal() // the forming batch may hold q: it takes the job
	}
	return true
}

// signalLocked wakes a worker for a newly ready key: in batch mode the
// worker gathering a batch if there is one, else an idle worker.
func (s *Scheduler[K, J]) signalLocked() {
	if s.batching != nil && s.batching.forming {
		s.batching.form.Signal()
		return
	}
	s.cond.Signal()
}

func (s *Scheduler[K, J]) work() {
	defer s.wg.Done()
	s.mu.Lock()
	for {
		for len(s.ready) == 0 && !s.closed {
			s.cond.Wait()
		}
		if s.closed {
			s.mu.Unlock()
			return
		}
		q, j := s.nextLocked()
		s.mu.Unlock()

		s.run(j)

		s.mu.Lock()
		s.doneLocked(q)
	}
}

// Next takes the head job of the first ready key, as a worker does, and
// reports false if no key is ready. The key runs (no other job of it is
// taken) until Done. For a scheduler without workers.
func (s *Scheduler[K, J]) Next() (K, J, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ready) == 0 {
		var k K
		var j J
		return k, j, false
	}
	q, j := s.nextLocked()
	return q.key, j, true
}

// Done ends the run of k's job taken by Next.
func (s *Scheduler[K, J]) Done(k K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.keys[k]; q != nil && q.running {
		s.doneLocked(q)
	}
}

// nextLocked takes the head job of the first ready key (there must be
// one); the key runs until doneLocked.
func (s *Scheduler[K, J]) nextLocked() (*keyQueue[K, J], J) {
	q := s.popReadyLocked()
	j := q.pop()
	q.lastTake = s.now()
	return q, j
}

// popReadyLocked takes the first ready key (there must be one) and marks
// it running.
func (s *Scheduler[K, J]) popReadyLocked() *keyQueue[K, J] {
	q := s.ready[0]
	s.ready[0] = nil
	s.ready = s.ready[1:]
	q.queued, q.running = false, true
	return q
}

// pop takes q's head job (there must be one).
func (q *keyQueue[K, J]) pop() J {
	var zero J
	j := q.jobs[0]
	q.jobs[0] = zero
	q.jobs = q.jobs[1:]
	return j
}

// doneLocked ends the run of q's job: the key is ready again if it has
// jobs, else forgotten.
func (s *Scheduler[K, J]) doneLocked(q *keyQueue[K, J]) {
	q.running = false
	if len(q.jobs) > 0 {
		q.queued = true
		s.ready = append(s.ready, q)
		s.cond.Signal()
		return
	}
	delete(s.keys, q.key)
}

// Idle reports whether the scheduler holds no key: no job queued and none
// running.
func (s *Scheduler[K, J]) Idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys) == 0
}

// Close stops the workers after the jobs they are running; queued jobs
// are dropped.
func (s *Scheduler[K, J]) Close() {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	if s.batching != nil {
		s.batching.form.Broadcast()
	}
	s.mu.Unlock()
	s.wg.Wait()
}
