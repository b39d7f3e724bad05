package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/bench/worksleep"
	"github.com/keyshare/keyshare/cmd/internal/loadgen"
	"github.com/keyshare/keyshare/consumer"
)

// batchSink compares the single-record Handler with the BatchHandler at
// batch sizes 1, 10, 100 and 1,000 on a sink that costs a fixed time per
// call plus a little per record: throughput on a backlog, and the latency
// of each record (from its produce call to the end of the handler call
// that handled it) at a steady rate every configuration keeps up with.
func (c *benchCommand) batchSink(ctx context.Context) error {
	n, rate, secs := 50000, 1000, 5
	if c.quick {
		n, secs = 4000, 2
	}
	const fixed, per = 5 * time.Millisecond, 50 * time.Microsecond
	const conc, wait = 16, 10 * time.Millisecond
	if err := c.produceKeys("batch", n, func(i int) string { return fmt.Sprintf("key-%d", i%1000) }); err != nil {
		return err
	}
	c.printf("## 9. Batch handler against a sink with a cost per call\n\n"+
		"The sink costs %s per handler call plus %s per record in it (a database transaction, a bulk API); `keyshare-bench member --work call:5ms+0.05ms` simulates the same. "+
		"1 member, 1 partition, %d handler calls at once (`Concurrency`), `MaxBatchWait` %s, `MaxInFlight` max(1,000, %d × batch size). "+
		"Throughput: %d records over 1,000 keys produced in advance, from the start of the first handler call to the end of the last. "+
		"Latency: a fresh group at the end of another topic, records produced at %d/s for %d s (below the single-record handler's capacity, %.0f/s), "+
		"from the producer's call (the record's CreateTime; includes the producer's linger.ms 5 and fetch.wait.max.ms 20) to the end of the handler call; p50 and p99 of each run, median and range over the runs.\n\n",
		fixed, per, conc, wait, conc, n, rate, secs, float64(conc)/(fixed+per).Seconds())
	c.printf("| handler | batch size | time | records/s | vs single | mean records per call | p50 latency | p99 latency |\n|---|---|---|---|---|---|---|---|\n")
	var single float64
	for _, size := range []int{0, 1, 10, 100, 1000} {
		var calls, records int64
		var mu sync.Mutex
		s, err := c.repeat(func() (time.Duration, error) {
			d, k, r, err := c.runSink("batch", "earliest", n, size, conc, wait, fixed, per, nil)
			mu.Lock()
			calls, records = calls+k, records+r
			mu.Unlock()
			return d, err
		})
		if err != nil {
			return err
		}
		var p50s, p99s []time.Duration
		for range c.runs {
			var lat []time.Duration
			_, _, _, err = c.runSink("batch-rate", "latest", rate*secs, size, conc, wait, fixed, per, func() error {
				_, err := loadgen.Produce(ctx, c.brokers, "batch-rate", rate*secs, 1000, 0, float64(rate), false)
				return err
			}, &lat)
			if err != nil {
				return err
			}
			slices.Sort(lat)
			p50s, p99s = append(p50s, pct(lat, 0.50)), append(p99s, pct(lat, 0.99))
		}
		thr := float64(n) / s.med.Seconds()
		name, sz := "Handler", "—"
		if size == 0 {
			single = thr
		} else {
			name, sz = "BatchHandler", fmt.Sprint(size)
		}
		c.printf("| %s | %s | %s | %.0f | %.1f× | %.1f | %s | %s |\n", name, sz, s, thr, thr/single,
			float64(records)/float64(max(calls, 1)), ms(summarize(p50s)), ms(summarize(p99s)))
	}
	c.printf("\nA batch fills from records already waiting, so on a backlog batches are full at once; at a low rate a batch waits up to `MaxBatchWait` for company, which is what it adds to latency.\n\n")
	return nil
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

// ms shows a median and range of durations in milliseconds.
func ms(s stats) string {
	f := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	if s.lo == s.hi {
		return fmt.Sprintf("%.1f ms", f(s.med))
	}
	return fmt.Sprintf("%.1f ms [%.1f–%.1f]", f(s.med), f(s.lo), f(s.hi))
}

// runSink runs one member on topic whose handler is the sink (size 0: the
// single-record Handler; else a BatchHandler of that size). Without feed
// it handles the n records already there (reset "earliest"); with feed it
// starts at the end and feed produces n. It returns the time from the
// start of the first handler call to the end of the last, the calls and the records handled, and
// with lat it collects every record's latency from its CreateTime.
func (c *benchCommand) runSink(topic string, reset consumer.OffsetReset, n, size, conc int, wait, fixed, per time.Duration, feed func() error, lat ...*[]time.Duration) (time.Duration, int64, int64, error) {
	var s span
	var mu sync.Mutex
	var calls int64
	var first time.Time // the start of the first call: a batch's records are all handled at its end
	begin := func() {
		mu.Lock()
		if first.IsZero() {
			first = time.Now()
		}
		mu.Unlock()
	}
	record := func(batch []*kafka.Message) {
		now := time.Now()
		mu.Lock()
		calls++
		if len(lat) > 0 {
			for _, m := range batch {
				*lat[0] = append(*lat[0], now.Sub(m.Timestamp))
			}
		}
		mu.Unlock()
		for range batch {
			s.hit()
		}
	}
	ms, err := c.startMembersWith(topic, 1, conc, reset, func(cfg *consumer.Config) {
		if size == 0 {
			cfg.Handler = func(ctx context.Context, m *kafka.Message) error {
				begin()
				if err := worksleep.Sleep(ctx, fixed+per); err != nil {
					return err
				}
				record([]*kafka.Message{m})
				return nil
			}
			return
		}
		cfg.BatchHandler, cfg.MaxBatchSize, cfg.MaxBatchWait = func(ctx context.Context, batch []*kafka.Message) []error {
			begin()
			if err := worksleep.Sleep(ctx, fixed+time.Duration(len(batch))*per); err != nil {
				return consumer.FailAll(len(batch), err)
			}
			record(batch)
			return nil
		}, size, wait
		cfg.MaxInFlight = max(1000, conc*size)
	})
	if err != nil {
		return 0, 0, 0, err
	}
	defer ms.stop()
	if feed != nil {
		if err := feed(); err != nil {
			return 0, 0, 0, err
		}
	}
	if err := s.wait(int64(n), 10*time.Minute); err != nil {
		return 0, 0, 0, err
	}
	s.mu.Lock()
	last := s.last
	s.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	return last.Sub(first), calls, s.n.Load(), nil
}
