package schedule

import "sync"

// Scheduler runs jobs of type J on a fixed number of workers, one job at a
// time each, keeping each key's jobs in order and never two of one key at
// once. Keys take turns: a worker runs one job of a key, then puts the key
// at the back of the ready list, so a key with many jobs does not starve
// the others.
type Scheduler[K comparable, J any] struct {
	queues[K, J]
	cond   *sync.Cond // wakes an idle worker: a key is ready, or closing
	closed bool
	run    func(J)
	wg     sync.WaitGroup
}

// New starts workers that call run for each job.
func New[K comparable, J any](workers int, run func(J)) *Scheduler[K, J] {
	s := &Scheduler[K, J]{queues: newQueues[K, J](), run: run}
	s.cond = sync.NewCond(&s.mu)
	for range workers {
		s.wg.Add(1)
		go s.work()
	}
	return s
}

// Submit queues j behind earlier jobs of key k.
func (s *Scheduler[K, J]) Submit(k K, j J) { s.SubmitBounded(k, j, 0) }

// SubmitBounded is Submit, unless k is blocked (blocked.go) with keep jobs
// queued already (keep > 0): then j is not queued and the result is false.
// One lock for both, as it runs for every record.
func (s *Scheduler[K, J]) SubmitBounded(k K, j J, keep int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ready := s.enqueueLocked(k, j, keep)
	if ready {
		s.cond.Signal()
	}
	return q != nil
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
		q := s.popReadyLocked()
		j := s.takeLocked(q)
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
	q := s.popReadyLocked()
	return q.key, s.takeLocked(q), true
}

// Done ends the run of k's job taken by Next.
func (s *Scheduler[K, J]) Done(k K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.keys[k]; q != nil && q.running {
		s.doneLocked(q)
	}
}

// doneLocked ends the run of q's job: the key is ready again if it has
// jobs, else idle (restLocked).
func (s *Scheduler[K, J]) doneLocked(q *keyQueue[K, J]) {
	if s.restLocked(q) {
		s.cond.Signal()
	}
}

// Close stops the workers after the jobs they are running; queued jobs
// are dropped.
func (s *Scheduler[K, J]) Close() {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	s.wg.Wait()
}
