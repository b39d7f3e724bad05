package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer/internal/schedule"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// testPipeline is a pipeline owning all of partition 0 of topic "t",
// without Kafka or etcd: records go in through handle, and the ledger shows
// what was completed.
func testPipeline(t *testing.T, mutate func(*Config)) (*pipeline, *owned) {
	cfg := DefaultConfig()
	cfg.Concurrency = 4
	cfg.Retry = RetryPolicy{MaxAttempts: 3, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}
	mutate(&cfg)
	c := &Consumer{cfg: cfg, log: testutil.Logger(t)}
	ctx, cancel := context.WithCancel(context.Background())
	p := &pipeline{c: c, ctx: ctx, stop: cancel, log: c.log, space: make(chan struct{}, 1)}
	p.mu.cond = sync.NewCond(&p.mu.Mutex)
	p.mu.ranges = make(map[string]*owned)
	p.mu.byTP = make(map[tp][]*owned)
	p.mu.pos = make(map[tp]int64)
	p.mu.jobs = make(map[tp]*jobList)
	p.mu.fetching = true
	st, err := ledger.NewState(ledger.Full, ledger.Entry{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	w := &owned{st: st, rs: schema.RangeState{Key: "r", Record: schema.RangeRecord{Topic: "t", Lo: 0, Hi: ledger.HashSpace, State: schema.StateActive}}}
	p.mu.ranges["r"] = w
	p.mu.byTP[tp{Topic: "t"}] = []*owned{w}
	p.sched = schedule.NewBatcher[jobKey](cfg.Concurrency, cfg.MaxBatchSize, cfg.MaxBatchWait, p.runBatch)
	t.Cleanup(func() { cancel(); p.sched.Close() })
	return p, w
}

func feed(p *pipeline, keys ...string) {
	topic := "t"
	for o, k := range keys {
		p.handle([]*kafka.Message{{TopicPartition: kafka.TopicPartition{Topic: &topic, Offset: kafka.Offset(o)}, Key: []byte(k), Value: []byte(k)}}, time.Now())
	}
}

func name(m *kafka.Message) string { return fmt.Sprintf("%s@%d", m.Key, m.TopicPartition.Offset) }

// TestBatchPartialFailure: the handler fails a@0 once. b@1 and c@3 of the
// same batch are done at once; a@2 (after a@0 in the batch) is discarded
// and runs only after a@0 succeeds, alone; the ledger completes every
// record, once.
func TestBatchPartialFailure(t *testing.T) {
	var mu sync.Mutex
	var calls [][]string
	failed := false
	release := make(chan struct{})
	p, w := testPipeline(t, func(c *Config) {
		c.MaxBatchSize, c.MaxBatchWait = 10, 50*time.Millisecond
		c.BatchHandler = func(ctx context.Context, batch []*kafka.Message) []error {
			var names []string
			for _, m := range batch {
				names = append(names, name(m))
			}
			mu.Lock()
			calls = append(calls, names)
			n := len(calls)
			res := make([]error, len(batch))
			hold := false
			for i, m := range batch {
				if name(m) == "a@0" && !failed {
					failed = true
					res[i] = errors.New("a@0 fails once")
				}
				hold = hold || (name(m) == "a@0" && n == 2)
			}
			mu.Unlock()
			if hold {
				<-release // hold the retry: a@2 must not run meanwhile
			}
			return res
		}
	})
	feed(p, "a", "b", "a", "c")
	testutil.WaitFor(t, "the retry of a@0", 5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(calls) == 2
	})
	p.mu.Lock()
	wm, pending := w.st.Watermark(), w.st.Pending()
	p.mu.Unlock()
	if wm != 0 || pending != 2 {
		t.Fatalf("while a@0 is retried: watermark %d, pending %d; want 0 and 2 (a@0, a@2)", wm, pending)
	}
	close(release)
	testutil.WaitFor(t, "all done", 5*time.Second, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return w.st.Watermark() == 4
	})
	mu.Lock()
	defer mu.Unlock()
	checkCalls(t, calls, []string{"a@0", "a@2", "b@1", "c@3"}, "a@0", "a@2")
	if got := p.c.metrics.handled.Load(); got != 4 {
		t.Fatalf("handled %d, want 4", got)
	}
}

// TestBatchWrongResultLength: a handler that returns the wrong number of
// results fails the whole batch: nothing is completed from it; the first
// record of each key is retried, the rest wait.
func TestBatchWrongResultLength(t *testing.T) {
	var mu sync.Mutex
	var calls [][]string
	p, w := testPipeline(t, func(c *Config) {
		c.MaxBatchSize, c.MaxBatchWait = 10, 50*time.Millisecond
		c.BatchHandler = func(ctx context.Context, batch []*kafka.Message) []error {
			var names []string
			for _, m := range batch {
				names = append(names, name(m))
			}
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, names)
			if len(calls) == 1 {
				return make([]error, 1) // wrong: one result for three records
			}
			return nil // all done
		}
	})
	feed(p, "a", "b", "a")
	testutil.WaitFor(t, "all done", 5*time.Second, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return w.st.Watermark() == 3
	})
	mu.Lock()
	defer mu.Unlock()
	checkCalls(t, calls, []string{"a@0", "a@2", "b@1"}, "a@0", "b@1", "a@2")
	if f := p.c.metrics.failed.Load(); f != 2 {
		t.Fatalf("failed attempts %d, want 2 (a@0 and b@1; a@2 waited)", f)
	}
}

// TestBatchPanicAndGiveUp: a panicking handler fails the batch; without a
// dead-letter topic the record is retried past MaxAttempts, its key stays
// blocked, and other keys go on.
func TestBatchPanicAndGiveUp(t *testing.T) {
	p, w := testPipeline(t, func(c *Config) {
		c.MaxBatchSize, c.MaxBatchWait = 4, 0
		c.BatchHandler = func(ctx context.Context, batch []*kafka.Message) []error {
			for _, m := range batch {
				if string(m.Key) == "poison" {
					panic("poison")
				}
			}
			return nil
		}
	})
	feed(p, "poison", "b", "poison", "c", "d", "e", "f")
	testutil.WaitFor(t, "other keys done", 5*time.Second, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		j := p.mu.jobAt(tp{Topic: "t"}, 0)
		if j == nil {
			return false
		}
		attempts, _ := j.failures()
		return w.st.Pending() == 2 && attempts > p.c.cfg.Retry.MaxAttempts
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	if wm := w.st.Watermark(); wm != 0 {
		t.Fatalf("watermark %d, want 0 (poison@0 never done)", wm)
	}
	j := p.mu.jobAt(tp{Topic: "t"}, 0)
	if j == nil {
		t.Fatal("poison@0 has no job")
	}
	if attempts, lastErr := j.failures(); attempts <= p.c.cfg.Retry.MaxAttempts || lastErr == "" {
		t.Fatalf("poison@0 job %+v: want attempts past MaxAttempts and its error", j)
	}
}

// TestBatchEndedMidAbandon: a range's records are cancelled one by one
// under p.mu (abandonLocked, when its drain budget is spent), and a batch's
// context ends at the first of them. The batch here holds a@0 and a@1 of
// one range; the test cancels a@1 and keeps p.mu, as abandonLocked does
// before it reaches a@0. The batch must not settle a@0's fate until the
// cancel is done: read early, a@0 looks cancelled for another record's
// range and is put back, with a@1 behind it, to run again here — which it
// does if a worker takes it before the cancel reaches it, after the range
// was handed on. Both are finished undone instead, pending for the range's
// next owner, and nothing is put back.
func TestBatchEndedMidAbandon(t *testing.T) {
	entered := make(chan struct{})
	p, w := testPipeline(t, func(c *Config) {
		c.Concurrency = 0 // no workers: the test takes the batches (TakeBatch)
		c.MaxBatchSize, c.MaxBatchWait = 10, 0
		c.BatchHandler = func(ctx context.Context, batch []*kafka.Message) []error {
			close(entered)
			<-ctx.Done()
			return FailAll(len(batch), ctx.Err())
		}
	})
	batcher := p.sched.(*schedule.Batcher[jobKey, *job])
	feed(p, "a", "a")
	b := batcher.TakeBatch()
	if got := len(b.Jobs()); got != 2 {
		t.Fatalf("batch of %d records, want a@0 and a@1", got)
	}
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		p.runBatch(b)
	}()
	<-entered

	abandon := func(j *job) { // abandonLocked's work for one record
		p.dropJobLocked(j)
		if err := w.st.Shelve(j.o, j.hash()); err != nil {
			t.Error(err)
		}
	}
	p.mu.Lock()
	first, second := p.mu.jobAt(tp{Topic: "t"}, 0), p.mu.jobAt(tp{Topic: "t"}, 1)
	abandon(second)
	select {
	case <-ran:
		// The batch settled its records while the cancel was under way.
	case <-time.After(200 * time.Millisecond):
		// It waits for p.mu, as it should.
	}
	abandon(first)
	p.mu.Unlock()
	<-ran

	if again := batcher.TakeBatch().Jobs(); len(again) != 0 {
		var names []string
		for _, j := range again {
			names = append(names, name(j.m))
		}
		t.Fatalf("records %v of the cancelled range were put back to run again", names)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if got := w.st.Pending(); got != 2 {
		t.Fatalf("%d records pending, want 2: both stay for the range's next owner", got)
	}
	if f := p.c.metrics.failed.Load(); f != 0 {
		t.Fatalf("%d failed attempts counted, want none: a cancel is not an attempt", f)
	}
}

// TestBatchConfig: bad batch settings are refused with ErrConfig, naming
// the field.
func TestBatchConfig(t *testing.T) {
	base := DefaultConfig()
	base.Group, base.Topics = "g", []string{"t"}
	base.Kafka = kafka.ConfigMap{"bootstrap.servers": "x:9092"}
	bh := func(context.Context, []*kafka.Message) []error { return nil }
	h := func(context.Context, *kafka.Message) error { return nil }
	for _, tc := range []struct {
		name, want string
		mutate     func(*Config)
	}{
		{"neither", "Config.Handler is nil", func(c *Config) {}},
		{"both", "both set", func(c *Config) { c.Handler, c.BatchHandler = h, bh }},
		{"size 0", "MaxBatchSize 0", func(c *Config) { c.BatchHandler, c.MaxBatchSize = bh, 0 }},
		{"size -1", "MaxBatchSize -1", func(c *Config) { c.BatchHandler, c.MaxBatchSize = bh, -1 }},
		{"size above in-flight", "exceeds MaxInFlight", func(c *Config) { c.BatchHandler, c.MaxBatchSize = bh, 5000 }},
		{"negative wait", "MaxBatchWait -1ms", func(c *Config) { c.BatchHandler, c.MaxBatchWait = bh, -time.Millisecond }},
		{"ok", "", func(c *Config) { c.BatchHandler, c.MaxBatchWait = bh, 0 }},
		{"single ignores batch fields", "", func(c *Config) { c.Handler, c.MaxBatchSize = h, 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.mutate(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (!errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want ErrConfig with %q", err, tc.want)
			}
		})
	}
}

// checkCalls checks that the first handler call got first (in any order
// across keys, in offset order within a key) and the later calls were one
// record each, then (a@2 after a@0).
func checkCalls(t *testing.T, calls [][]string, first []string, then ...string) {
	t.Helper()
	if len(calls) != 1+len(then) {
		t.Fatalf("calls %v: want %v, then each of %v alone", calls, first, then)
	}
	got := slices.Clone(calls[0])
	if slices.Index(got, "a@0") > slices.Index(got, "a@2") {
		t.Fatalf("first call %v: a@2 before a@0", got)
	}
	slices.Sort(got)
	if !slices.Equal(got, first) {
		t.Fatalf("first call %v, want %v", calls[0], first)
	}
	var rest []string
	for _, c := range calls[1:] {
		if len(c) != 1 {
			t.Fatalf("calls %v: a retry or a later batch of more than one record", calls)
		}
		rest = append(rest, c[0])
	}
	if slices.Index(rest, "a@2") < slices.Index(rest, "a@0") {
		t.Fatalf("calls %v: a@2 ran before a@0's retry", calls)
	}
	slices.Sort(rest)
	want := slices.Clone(then)
	slices.Sort(want)
	if !slices.Equal(rest, want) {
		t.Fatalf("later calls %v, want %v", rest, want)
	}
}

// TestGroupCtxEndsAtOnceForCancelledJob: a batch's context is ended
// before groupCtx returns when one of its records was cancelled already
// (its range drained meanwhile), so the handler never starts with a
// context that does not say so.
func TestGroupCtxEndsAtOnceForCancelledJob(t *testing.T) {
	p, _ := testPipeline(t, func(c *Config) { c.Concurrency = 0 })
	jobs := make([]*job, 2)
	for i := range jobs {
		jobs[i] = &job{ctx: jobCtx{parent: p.ctx}, p: p}
	}
	jobs[1].cancel()
	for range 100 {
		ctx, done := p.groupCtx(jobs)
		err := ctx.Err()
		done()
		if err == nil {
			t.Fatal("the batch's context had not ended when groupCtx returned, with one of its records cancelled")
		}
	}
}
