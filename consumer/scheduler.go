package consumer

import (
	"context"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// jobKey identifies the records that must run one at a time, in order: one
// key of one partition. Records with a null key have no order to keep, so
// each is its own key (by offset).
type jobKey struct {
	topic     string
	partition int32
	key       string
	null      bool
	offset    int64 // only for null keys
}

// job is one record handed to a worker and not yet finished.
type job struct {
	key  jobKey
	next *job // the key's next record

	t      tp
	o      int64
	h      uint32
	m      *kafka.Message
	ctx    context.Context // ends if the member must stop working on the record
	cancel context.CancelFunc
	since  time.Time
	// attempts and lastErr are set by the worker while retrying (under the
	// pipeline's lock).
	attempts int
	lastErr  string
	// busy is how long the record has held a worker (load.go); written
	// by the worker running it, read when it finishes.
	busy time.Duration
}

// keyQueue holds one key's records in offset order.
type keyQueue struct {
	key        jobKey
	head, tail *job
	n          int       // jobs from head to tail
	running    bool      // a worker is on this key
	queued     bool      // the key is in the ready list
	lastTake   time.Time // when a worker last took a record of the key (or the queue was made)
}

// scheduler runs jobs on a fixed number of workers, keeping each key's jobs
// in order and never two of one key at once. Keys take turns: a worker runs
// one job of a key, then puts the key at the back of the ready list, so a
// key with many records does not starve the others.
type scheduler struct {
	mu     sync.Mutex
	cond   *sync.Cond
	keys   map[jobKey]*keyQueue
	ready  []*keyQueue
	closed bool
	run    func(*job)
	wg     sync.WaitGroup
	// now is the clock that says when a key counts as blocked
	// (blocked.go): time.Now, or a test's.
	now func() time.Time

	// Batch mode (batch.go): runBatch replaces run.
	runBatch func(*batch)
	maxBatch int
	maxWait  time.Duration
	forming  bool       // a worker is gathering a batch
	form     *sync.Cond // wakes the forming worker: a key is ready, or a held key got a record
}

// newScheduler starts workers that call run for each job.
func newScheduler(workers int, run func(*job)) *scheduler {
	s := &scheduler{keys: make(map[jobKey]*keyQueue), run: run, now: time.Now}
	s.cond = sync.NewCond(&s.mu)
	for range workers {
		s.wg.Add(1)
		go s.work()
	}
	return s
}

// submit queues j behind earlier jobs of its key.
func (s *scheduler) submit(j *job) { s.submitBounded(j, 0) }

// submitBounded is submit, unless j's key is blocked (blocked.go) with
// keep records queued already (keep > 0): then j is not queued and the
// result is false. One lock for both, as it runs for every record.
func (s *scheduler) submitBounded(j *job, keep int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.keys[j.key]
	if q == nil {
		q = &keyQueue{key: j.key, lastTake: s.now()}
		s.keys[j.key] = q
	} else if keep > 0 && q.n >= keep && s.now().Sub(q.lastTake) >= keyBlockedAfter {
		return false
	}
	q.n++
	if q.tail == nil {
		q.head, q.tail = j, j
	} else {
		q.tail.next, q.tail = j, j
	}
	switch {
	case !q.running && !q.queued:
		q.queued = true
		s.ready = append(s.ready, q)
		s.signalLocked()
	case q.running && s.forming:
		s.form.Signal() // the forming batch may hold q: it takes the record
	}
	return true
}

// signalLocked wakes a worker for a newly ready key: in batch mode the
// worker gathering a batch if there is one, else an idle worker.
func (s *scheduler) signalLocked() {
	if s.forming {
		s.form.Signal()
		return
	}
	s.cond.Signal()
}

func (s *scheduler) work() {
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

// nextLocked takes the head record of the first ready key (there must be
// one); the key runs until doneLocked.
func (s *scheduler) nextLocked() (*keyQueue, *job) {
	q := s.ready[0]
	s.ready[0] = nil
	s.ready = s.ready[1:]
	q.queued, q.running = false, true
	j := q.head
	q.head = j.next
	if q.head == nil {
		q.tail = nil
	}
	j.next = nil
	q.n--
	q.lastTake = s.now()
	return q, j
}

// doneLocked ends the run of q's record taken by nextLocked: the key is
// ready again if it has records, else forgotten.
func (s *scheduler) doneLocked(q *keyQueue) {
	q.running = false
	if q.head != nil {
		q.queued = true
		s.ready = append(s.ready, q)
		s.cond.Signal()
		return
	}
	delete(s.keys, q.key)
}

// close stops the workers after the jobs they are running; queued jobs are
// dropped (their records stay pending in the ledger and run again on the
// range's next owner).
func (s *scheduler) close() {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	if s.form != nil {
		s.form.Broadcast()
	}
	s.mu.Unlock()
	s.wg.Wait()
}
