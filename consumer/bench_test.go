package consumer

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/consumer/internal/schedule"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// benchPipeline builds a pipeline that owns the given ranges of partition 0
// of topic "t", without Kafka or etcd: the per-record path only (hash,
// filter through the ranges, ledger, scheduler, handler, completion), run
// by workers (16 if 0, DefaultConfig's).
func benchPipeline(b *testing.B, ranges []ledger.HashRange, workers int, handler Handler) *pipeline {
	cfg := DefaultConfig()
	cfg.Handler = handler
	if workers > 0 {
		cfg.Concurrency = workers
	}
	c := &Consumer{cfg: cfg, log: hclog.NewNullLogger()}
	ctx, cancel := context.WithCancel(context.Background())
	p := &pipeline{c: c, ctx: ctx, stop: cancel, log: c.log, space: make(chan struct{}, 1)}
	p.mu.cond = sync.NewCond(&p.mu.Mutex)
	p.mu.ranges = make(map[string]*owned)
	p.mu.byTP = make(map[tp][]*owned)
	p.mu.pos = make(map[tp]int64)
	p.mu.jobs = make(map[tp]*jobList)
	p.mu.fetching = true
	t := tp{Topic: "t"}
	for i, r := range ranges {
		st, err := ledger.NewState(r, ledger.Entry{}, 0)
		if err != nil {
			b.Fatal(err)
		}
		w := &owned{st: st, rs: schema.RangeState{Key: fmt.Sprint(i), Record: schema.RangeRecord{Topic: "t", Lo: r.Lo, Hi: r.Hi, State: schema.StateActive}}}
		p.mu.ranges[w.rs.Key] = w
		p.mu.byTP[t] = append(p.mu.byTP[t], w)
	}
	p.sched = schedule.New[jobKey](cfg.Concurrency, p.runJob)
	b.Cleanup(func() { cancel(); p.sched.Close() })
	return p
}

// cpuTime is the process's user and system CPU time so far: on two cores
// the workers and the loop that feeds them overlap, so CPU per record is
// steadier than the wall time per record.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPipeline measures the per-record cost of the member's data path
// without I/O: a record is fetched (handle), filtered through the
// partition's ranges, dispatched to its key's queue, run by a no-op handler
// and completed in the ledger; the FenceOf case's handler asks for its
// record's fence (the lookup a fenced sink makes); the 1-worker case runs
// the records on one worker instead of 16, which on two cores keeps the
// handoff between the loop and a worker and leaves out the contention
// among workers. cpu-ns/op is the CPU time per record of the whole
// process (the benchmark's loop included). Run with:
//
//	go test -run '^$' -bench BenchmarkPipeline -benchmem ./consumer/
func BenchmarkPipeline(b *testing.B) {
	for _, tc := range []struct {
		name    string
		ranges  []ledger.HashRange
		fenceOf bool
		workers int // 0: DefaultConfig's
	}{
		{"whole-partition", []ledger.HashRange{ledger.Full}, false, 0},
		{"whole-partition-FenceOf", []ledger.HashRange{ledger.Full}, true, 0},
		{"whole-partition-1-worker", []ledger.HashRange{ledger.Full}, false, 1},
		// A member that owns a quarter of the partition: three quarters of
		// the records only pass through its filter.
		{"quarter-of-4-ranges", []ledger.HashRange{{Lo: 0, Hi: ledger.HashSpace / 4}}, false, 0},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var done sync.WaitGroup
			p := benchPipeline(b, tc.ranges, tc.workers, func(ctx context.Context, m *kafka.Message) error {
				defer done.Done()
				if tc.fenceOf {
					if _, ok := FenceOf(ctx, m); !ok {
						b.Error("FenceOf found no fence in a handler's context")
					}
				}
				return nil
			})
			msgs := benchRecords()
			mine := 0
			for _, m := range msgs {
				if tc.ranges[0].Contains(ledger.Hash(m.Key, 0)) {
					mine++
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime(b)
			burst := make([]*kafka.Message, 0, pollBurst)
			for i := 0; i < b.N; i++ {
				m := msgs[i%len(msgs)]
				m.TopicPartition.Offset = kafka.Offset(i)
				if tc.ranges[0].Contains(ledger.Hash(m.Key, int64(i))) {
					done.Add(1)
				}
				// The fetcher hands each record over once; copy it so the
				// worker does not see the next offset written into m.
				cp := *m
				burst = append(burst, &cp)
				if len(burst) == pollBurst || i%1024 == 1023 || i == b.N-1 {
					p.handle(burst, time.Now()) // as the fetch loop does
					burst = burst[:0]
				}
				if i%1024 == 1023 {
					done.Wait() // keep in-flight bounded, as backpressure would
				}
			}
			done.Wait()
			b.StopTimer()
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(mine)/float64(len(msgs)), "share-run")
		})
	}
}

// benchRecords are the benchmarks' records of topic "t": 20,000 of them
// over 10,000 keys, each key's two records apart, as the throughput
// scenario's records are (keyshare-bench): more keys than the scheduler
// keeps idle queues for, so most records find no queue for their key.
func benchRecords() []*kafka.Message {
	topic := "t"
	const keys = 10000
	keyBytes := make([][]byte, keys)
	for i := range keyBytes {
		keyBytes[i] = fmt.Appendf(nil, "key-%d", i)
	}
	msgs := make([]*kafka.Message, 20000)
	for i := range msgs {
		msgs[i] = &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic}, Key: keyBytes[i%keys]}
	}
	return msgs
}

// BenchmarkPipelineWithoutHandoff is BenchmarkPipeline's whole-partition
// case with each record run on the benchmark's own goroutine, through a
// scheduler without workers (Next, Done), right after handle: the same
// bookkeeping (filter, ledger, key queue, completion, load) without
// handing the record to a worker. A member never runs records this way (a
// slow handler would hold up the fetch loop); the benchmark measures what
// the handoff costs against the rest. With -cpu 1,2 it also shows what the
// second core costs the handoff.
func BenchmarkPipelineWithoutHandoff(b *testing.B) {
	handled := 0
	p := benchPipeline(b, []ledger.HashRange{ledger.Full}, 0, func(context.Context, *kafka.Message) error {
		handled++ // on the benchmark's goroutine
		return nil
	})
	p.sched.Close()
	sched := schedule.New[jobKey](0, p.runJob)
	p.sched = sched
	msgs := benchRecords()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	var at time.Time
	for i := 0; i < b.N; i++ {
		if i%pollBurst == 0 {
			at = time.Now()
		}
		cp := *msgs[i%len(msgs)] // as in BenchmarkPipeline
		cp.TopicPartition.Offset = kafka.Offset(i)
		p.handle([]*kafka.Message{&cp}, at)
		k, j, taken, ok := sched.Next()
		if !ok {
			b.Fatalf("record %d was not queued to run", i)
		}
		p.runJob(j, taken)
		sched.Done(k)
	}
	b.StopTimer()
	if handled != b.N {
		b.Fatalf("the handler ran %d of %d records", handled, b.N)
	}
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}
