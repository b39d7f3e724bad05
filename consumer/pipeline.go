package consumer

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/consumer/internal/schedule"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
)

type tp = assign.TopicPartition

// pipeline is a member's data path for one etcd session: fetch, filter,
// dispatch, complete, flush. When the session ends the whole pipeline is
// thrown away; the next session starts from etcd.
//
// One file per concern: the range table and the pure functions over it
// (table.go), the fetch loop, the only driver of the fetcher (fetch.go,
// fetcher.go), filter and dispatch to the scheduler (dispatch.go,
// job.go; the scheduler is internal/schedule), the in-flight bound and an operator's pause
// (backpressure.go), blocked keys' records out of memory (blocked.go), moving to a new assignment (reconcile.go), draining
// and releasing revoked ranges (drain.go), writing the ledger (flush.go),
// records Kafka deleted before they were handled (retention.go), and the
// load of each owned range, reported to the leader (load.go).
type pipeline struct {
	c     *Consumer
	sess  *coord.Session
	log   hclog.Logger
	kc    fetcher         // the Kafka client (fetcher.go)
	ctx   context.Context // ends with the session or on stop
	stop  context.CancelFunc
	sched scheduler // job.go
	// parkers counts the keys' parkers running (parker.go), so that a
	// record asks for its key's pending copies only while one runs.
	parkers atomic.Int32

	resync  chan struct{} // ask rereadLoop to read the assignment again
	flushCh chan struct{} // ask the flusher to write now
	space   chan struct{} // a record finished: there may be room below the in-flight bound
	// retentionCh asks the fetch loop to look for deleted records again.
	retentionCh chan struct{}

	// Answers of the reads that the fetch loop leaves to goroutines, so
	// that no I/O holds back an assignment (reconcile.go).
	reread    chan schema.Assignment // the assignment read again (rereadLoop)
	startsCh  chan startsAnswer      // start offsets of new ranges (readStarts)
	logBounds chan logBounds         // log starts and ends (retention.go)

	// Only the fetch loop uses these.
	//
	// boundSince is when the fetch loop reached the in-flight bound (zero
	// below it).
	boundSince time.Time
	// msgs holds the records of a burst (fetch.go).
	msgs []*kafka.Message
	// latest is the assignment applied last.
	latest schema.Assignment
	// readingStarts: a start-offset read runs; queryingLog: a log-offset
	// query runs, and queryAgain asks for another once it ends.
	readingStarts, queryingLog, queryAgain bool
	// shelvesChecked is when the fetch loop last looked for shelved keys
	// that move again (blocked.go).
	shelvesChecked time.Time
	// blockedChecked is when the fetch loop last looked for blocked keys
	// (blocked.go).
	blockedChecked time.Time

	wg sync.WaitGroup
	mu struct {
		sync.Mutex
		cond       *sync.Cond // signalled when in-flight work finishes
		gen        int64      // the newest assignment generation seen
		rev        int64      // etcd revision of the assignment applied last
		rangeTable            // ranges, byTP, assigned, pos (table.go)
		inFlight              // inflight, inflightBytes, jobs (inflight.go)
		holds                 // paused, held, heldKnown, halted (holds.go)
		fetching   bool       // false once leaving: no new records
		// burstKeys and burstJobs are the records of the burst being
		// handled that run, for the scheduler (dispatch.go).
		burstKeys   []jobKey
		burstJobs   []*job
		burstQueued []bool
		// unflushed counts records completed since the flush that last
		// reached etcd: they would run again if the member crashed now.
		unflushed int
		// aboveEnd are partitions whose position is above the log end
		// (gaps.go); nil until one is found.
		aboveEnd map[tp]*AboveLogEnd
		// shelves are the keys whose records were taken out of memory
		// while blocked, per partition, to fetch again (blocked.go).
		shelves map[tp]shelf
		// load is what each owned range's records cost since the last
		// load report (load.go).
		load loadTable
		// skipsDone are operators' skips applied, whose completions the
		// next flush writes; skipsDeleting, those the last flush wrote,
		// being deleted (keyops.go).
		skipsDone, skipsDeleting []coord.KeyOp
		// keyLocks keep a key's unpark prelude and its parks apart;
		// preludes are the preludes running per partition, each with
		// its key's hash (a drain waits for them, and cancels them
		// when its budget is spent); keyOpWritten is the revision of this member's last
		// write of each key operation, so that a copy the watch has not
		// brought up to it is not acted on (prelude.go).
		keyLocks     map[jobKey]*sync.Mutex
		preludes     map[tp]map[*preludeRun]uint32
		keyOpWritten map[string]int64
		// preludeKeys are the keys whose prelude runs on a goroutine of
		// its own (watchKeyOps).
		preludeKeys map[jobKey]bool
	}

	// epoch is when the pipeline began, with the monotonic clock's
	// reading: a job keeps its queue time as a duration after it
	// (job.queued).
	epoch time.Time
}

func newPipeline(c *Consumer, sess *coord.Session) *pipeline {
	ctx, cancel := context.WithCancel(sess.Ctx())
	p := &pipeline{
		c: c, sess: sess, kc: c.kc, ctx: ctx, stop: cancel, epoch: time.Now(),
		log:     c.log.With("member", sess.ID()),
		resync:  make(chan struct{}, 1),
		flushCh: make(chan struct{}, 1),
		space:   make(chan struct{}, 1),

		retentionCh: make(chan struct{}, 1),
		reread:      make(chan schema.Assignment),
		startsCh:    make(chan startsAnswer, 1),
		logBounds:   make(chan logBounds, 1),
	}
	p.mu.cond = sync.NewCond(&p.mu.Mutex)
	p.mu.rangeTable = newRangeTable()
	p.mu.jobs = make(map[tp]*jobList)
	p.mu.halted = make(map[tp]bool)
	p.mu.shelves = make(map[tp]shelf)
	p.mu.preludes = make(map[tp]map[*preludeRun]uint32)
	p.mu.keyOpWritten = make(map[string]int64)
	p.mu.preludeKeys = make(map[jobKey]bool)
	p.mu.load = newLoadTable(time.Now())
	p.mu.fetching = true
	p.mu.held = true // until the first read of the pause state
	if c.cfg.BatchHandler != nil {
		p.sched = schedule.NewBatcher[jobKey](c.cfg.Concurrency, c.cfg.MaxBatchSize, c.cfg.MaxBatchWait, p.runBatch) // batch.go
	} else {
		p.sched = schedule.New[jobKey](c.cfg.Concurrency, p.runJob)
	}
	return p
}

func (p *pipeline) goFunc(fn func()) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		fn()
	}()
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
