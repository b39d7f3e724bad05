package schedule

import (
	"sync"
	"time"
)

// keyQueue holds one key's jobs in submission order.
type keyQueue[K Key, J any] struct {
	key      K
	jobs     []J       // queued, oldest first
	running  bool      // a worker is on this key
	queued   bool      // the key is in the ready list
	idle     bool      // no job, not running: kept in keys for the key's next job (restLocked)
	lastTake time.Time // when a worker last took a job of the key (or the queue was made)
	// older and newer link the idle queues, in the order they went idle.
	older, newer *keyQueue[K, J]
	// sameHash links the queues of keys with the same hash (keyTable).
	sameHash *keyQueue[K, J]
}

// queues are the key queues that Scheduler and Batcher share: each key's
// jobs in order, the keys ready to run in turn, and the clock that says
// when a key counts as blocked (blocked.go). A key is running from the
// moment a worker takes it until the worker gives it back (requeueLocked);
// what a worker takes, and whom a newly ready key wakes, is the
// scheduler's own.
type queues[K Key, J any] struct {
	mu    sync.Mutex
	keys  keyTable[K, J]
	ready fifo[*keyQueue[K, J]]
	// spare are queues of keys a Scheduler forgot (the idle key it had
	// kept longest), kept to serve new keys without allocating. A Batcher
	// forgets a key whenever its queue runs empty, but its batches keep
	// their queues, so it spares none.
	spare []*keyQueue[K, J]
	// idleOldest and idleNewest are the ends of the list of queues a
	// Scheduler keeps in keys after they ran empty (restLocked), linked
	// through their older and newer; idleCount is its length.
	idleOldest, idleNewest *keyQueue[K, J]
	idleCount              int
	// now is the clock that says when a key counts as blocked: time.Now,
	// or a test's.
	now func() time.Time
}

func newQueues[K Key, J any]() queues[K, J] {
	return queues[K, J]{keys: newKeyTable[K, J](), now: time.Now}
}

// SetClock replaces the clock that says when a key counts as blocked
// (time.Now by default). Set it before the first Submit.
func (s *queues[K, J]) SetClock(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
}

// Now reads the scheduler's clock.
func (s *queues[K, J]) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now()
}

// Idle reports whether the scheduler holds no key: no job queued and none
// running.
func (s *queues[K, J]) Idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys.len() == s.idleCount
}

// enqueueLocked queues j, which arrived at at (on the scheduler's clock),
// behind earlier jobs of key k, unless k is blocked (blocked.go) with keep
// jobs queued already (keep > 0): then it returns nil. Else it returns k's
// queue, and whether k became ready by it (the caller wakes a worker).
func (s *queues[K, J]) enqueueLocked(k K, j J, keep int, at time.Time) (q *keyQueue[K, J], ready bool) {
	q = s.keys.get(k)
	if q == nil {
		q = s.newQueueLocked(k, at)
		s.keys.put(q)
	} else if q.idle {
		s.unidleLocked(q)
		q.lastTake = at // as a new queue's
	} else if keep > 0 && len(q.jobs) >= keep && at.Sub(q.lastTake) >= BlockedAfter {
		return nil, false
	}
	q.jobs = append(q.jobs, j)
	if q.running || q.queued {
		return q, false
	}
	q.queued = true
	s.ready.push(q)
	return q, true
}

// popReadyLocked takes the first ready key (there must be one) and marks
// it running.
func (s *queues[K, J]) popReadyLocked() *keyQueue[K, J] {
	q := s.ready.pop()
	q.queued, q.running = false, true
	return q
}

// takeLocked takes q's head job (there must be one) for a worker, at now
// (the scheduler's clock).
func (s *queues[K, J]) takeLocked(q *keyQueue[K, J], now time.Time) J {
	var zero J
	j := q.jobs[0]
	q.jobs[0] = zero
	if len(q.jobs) == 1 {
		q.jobs = q.jobs[:0] // keep the array from its start for the next jobs
	} else {
		q.jobs = q.jobs[1:]
	}
	q.lastTake = now
	return j
}

// endRunLocked ends q's run: the key is ready again if it has jobs (the
// result is true: the caller wakes a worker); else the caller forgets it
// (requeueLocked) or keeps it idle (restLocked).
func (s *queues[K, J]) endRunLocked(q *keyQueue[K, J]) bool {
	q.running = false
	if len(q.jobs) == 0 {
		return false
	}
	q.queued = true
	s.ready.push(q)
	return true
}

// requeueLocked ends q's run as endRunLocked does, and forgets a key
// without jobs.
func (s *queues[K, J]) requeueLocked(q *keyQueue[K, J]) bool {
	if s.endRunLocked(q) {
		return true
	}
	s.keys.remove(q)
	return false
}

// restLocked ends q's run as endRunLocked does, and a queue run empty
// stays in keys, idle, for the key's next job: forgetting a key and
// making its queue again cost a map delete and insert for nearly every
// record when a key has few jobs at a time (docs/benchmarks.md). At most
// maxIdleQueues stay idle; the oldest are forgotten first. For a
// Scheduler, whose workers keep no queue after they give it back.
func (s *queues[K, J]) restLocked(q *keyQueue[K, J]) bool {
	if s.endRunLocked(q) {
		return true
	}
	if s.idleCount == maxIdleQueues {
		// Full: the queue idle longest is forgotten.
		old := s.idleOldest
		s.unidleLocked(old)
		s.keys.remove(old)
		s.spareLocked(old)
	}
	q.idle, q.older = true, s.idleNewest
	if q.older != nil {
		q.older.newer = q
	} else {
		s.idleOldest = q
	}
	s.idleNewest = q
	s.idleCount++
	return false
}

// unidleLocked takes idle queue q out of the idle list: its key has a
// job again, or is forgotten.
func (s *queues[K, J]) unidleLocked(q *keyQueue[K, J]) {
	if q.older != nil {
		q.older.newer = q.newer
	} else {
		s.idleOldest = q.newer
	}
	if q.newer != nil {
		q.newer.older = q.older
	} else {
		s.idleNewest = q.older
	}
	q.idle, q.older, q.newer = false, nil, nil
	s.idleCount--
}

// maxIdleQueues bounds the idle queues kept in keys: the queues of the
// keys that ran empty most recently, up to this many. They hold their
// keys' bytes (a job key holds the record's key as a string) and their
// job arrays, emptied.
const maxIdleQueues = 4096

// spareLocked keeps forgotten queue q (the idle list let it go) for a new
// key. Only for a queue nothing refers to any more: a Batcher's batch
// keeps its keys' queues after it releases them, a Scheduler's worker
// does not.
func (s *queues[K, J]) spareLocked(q *keyQueue[K, J]) {
	if len(s.spare) < maxSpareQueues {
		var zero K
		q.key = zero
		s.spare = append(s.spare, q)
	}
}

// maxSpareQueues bounds the queues kept for new keys: enough for the keys
// a member's in-flight records span at once, little memory after a burst.
const maxSpareQueues = 1024

// newQueueLocked returns an empty queue for key k, a spare one if there
// is, made at now.
func (s *queues[K, J]) newQueueLocked(k K, now time.Time) *keyQueue[K, J] {
	if n := len(s.spare); n > 0 {
		q := s.spare[n-1]
		s.spare[n-1] = nil
		s.spare = s.spare[:n-1]
		q.key, q.lastTake = k, now
		return q
	}
	return &keyQueue[K, J]{key: k, lastTake: now}
}
