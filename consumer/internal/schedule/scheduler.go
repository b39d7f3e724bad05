package schedule

import (
	"sync"
	"time"
)

// Scheduler runs jobs of type J on a fixed number of workers, one job at a
// time each, keeping each key's jobs in order and never two of one key at
// once. Keys take turns: a worker runs one job of a key, then puts the key
// at the back of the ready list, so a key with many jobs does not starve
// the others.
type Scheduler[K Key, J any] struct {
	queues[K, J]
	cond   *sync.Cond // wakes an idle worker: a key is ready, or closing
	closed bool
	run    func(J, time.Time)
	wg     sync.WaitGroup
}

// New starts workers that call run for each job, with the time the worker
// took it (the scheduler's clock, read once for both the key's blocked
// check and the runner: a runner that times its job starts from it).
func New[K Key, J any](workers int, run func(j J, taken time.Time)) *Scheduler[K, J] {
	s := &Scheduler[K, J]{queues: newQueues[K, J](), run: run}
	s.cond = sync.NewCond(&s.mu)
	for range workers {
		s.wg.Add(1)
		go s.work()
	}
	return s
}

// Submit queues j behind earlier jobs of key k.
func (s *Scheduler[K, J]) Submit(k K, j J) {
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
func (s *Scheduler[K, J]) SubmitAll(keys []K, jobs []J, keep int, at time.Time, queued []bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range jobs {
		queued[i] = s.submitLocked(keys[i], jobs[i], keep, at)
	}
}

func (s *Scheduler[K, J]) submitLocked(k K, j J, keep int, at time.Time) bool {
	q, ready := s.enqueueLocked(k, j, keep, at)
	if ready {
		s.cond.Signal()
	}
	return q != nil
}

func (s *Scheduler[K, J]) work() {
	defer s.wg.Done()
	s.mu.Lock()
	for {
		for s.ready.len() == 0 && !s.closed {
			s.cond.Wait()
		}
		if s.closed {
			s.mu.Unlock()
			return
		}
		q := s.popReadyLocked()
		now := s.now()
		j := s.takeLocked(q, now)
		s.mu.Unlock()

		s.run(j, now)

		s.mu.Lock()
		s.doneLocked(q)
	}
}

// Next takes the head job of the first ready key, as a worker does, with
// the time it took it, and reports false if no key is ready. The key runs
// (no other job of it is taken) until Done. For a scheduler without
// workers.
func (s *Scheduler[K, J]) Next() (k K, j J, taken time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready.len() == 0 {
		return k, j, taken, false
	}
	q := s.popReadyLocked()
	taken = s.now()
	return q.key, s.takeLocked(q, taken), taken, true
}

// Done ends the run of k's job taken by Next.
func (s *Scheduler[K, J]) Done(k K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.keys.get(k); q != nil && q.running {
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
