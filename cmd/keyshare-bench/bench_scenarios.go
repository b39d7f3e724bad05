package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/bench/worksleep"
	"github.com/keyshare/keyshare/cmd/internal/loadgen"
	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/ledger"
)

// parallelConsumerWorkload is Confluent Parallel Consumer's published
// workload: 10,000 records, work uniform in 0–5 ms, 1 partition, total
// concurrency 100, with 1,000 keys and with Zipf-distributed keys.
func (c *benchCommand) parallelConsumerWorkload(ctx context.Context) error {
	n := 10000
	if c.quick {
		n = 1000
	}
	work := uniformWork(5 * time.Millisecond)
	var sum time.Duration
	for o := range n {
		sum += work(&kafka.Message{TopicPartition: kafka.TopicPartition{Offset: kafka.Offset(o)}})
	}
	ideal := sum / 100
	c.printf("## 1. Parallel Consumer's workload\n\n%d records, work uniform 0–5 ms (the same per record in every run: Σwork = %.1f s), 1 partition, total concurrency 100. Ideal = Σwork ÷ 100 = %.2f s. Time is from the first record handled to the last. Parallel Consumer's README reports 22.2 s in partition order and about 2.1 s in key order on this workload.\n\n",
		n, sum.Seconds(), ideal.Seconds())
	c.printf("| keys | consumer | time | records/s | × ideal | speed-up over vanilla |\n|---|---|---|---|---|---|\n")
	zipf := rand.NewZipf(rand.New(rand.NewPCG(3, 5)), 1.2, 1, 999)
	zipfKeys := make([]string, n)
	for i := range zipfKeys {
		zipfKeys[i] = fmt.Sprintf("key-%d", zipf.Uint64())
	}
	var notes []string
	for _, kd := range []struct {
		name, topic string
		key         func(i int) string
	}{
		{"1,000 uniform", "pc-uniform", func(i int) string { return fmt.Sprintf("key-%d", i%1000) }},
		{"Zipf s=1.2 over 1,000", "pc-zipf", func(i int) string { return zipfKeys[i] }},
	} {
		if err := c.produceKeys(kd.topic, n, kd.key); err != nil {
			return err
		}
		vs, err := c.repeat(func() (time.Duration, error) { return c.runVanilla(kd.topic, n, work) })
		if err != nil {
			return err
		}
		van := vs.med
		row := func(name string, s stats) {
			c.printf("| %s | %s | %s | %.0f | %.2f | %.1f× |\n", kd.name, name, s, float64(n)/s.med.Seconds(), s.med.Seconds()/ideal.Seconds(), van.Seconds()/s.med.Seconds())
		}
		row("vanilla consumer-group member", vs)
		for _, cfg := range []struct {
			name    string
			m, conc int
		}{{"keyshare, 1 member × 100", 1, 100}, {"keyshare, 4 members × 25", 4, 25}} {
			s, err := c.repeat(func() (time.Duration, error) { return c.runKeyshare(kd.topic, n, cfg.m, cfg.conc, work) })
			if err != nil {
				return err
			}
			row(cfg.name, s)
		}
		s, err := c.repeat(func() (time.Duration, error) { return c.runSettled(kd.topic, n, 4, 25, kd.key, work) })
		if err != nil {
			return err
		}
		row("keyshare, 4 members × 25, settled first; from the produce", s)
		busiest, records := busiestQuarter(n, kd.key, work)
		notes = append(notes, fmt.Sprintf("%s: the busiest quarter of the hash space holds %d records and %.2f s of work (the mean is %.2f s), %.2f s with 25 workers, %.2f× ideal.",
			kd.name, records, busiest.Seconds(), sum.Seconds()/4, busiest.Seconds()/25, busiest.Seconds()/25/ideal.Seconds()))
	}
	c.printf("\n%s\n", strings.Join(notes, " "))
	c.printf("\nGoal: within 2× of ideal. In the first keyshare rows the members join while the records wait in the partition, so their times include the group forming (the first member takes the whole partition, the others split it as they join, and the ranges handed over drain). In the last row the four members settle at the log's end first, and the time runs from the first record's Produce call (the producer connected beforehand; the same keys and the same work per record as the other rows) to the last record handled: the measure of Parallel Consumer's own benchmark, whose goal here is 1.5× ideal. The work is slept with a timerfd (bench/worksleep), which wakes within tens of µs of the work's end, where a Go timer wakes up to a millisecond late.\n\n")
	return nil
}

// busiestQuarter returns the work and the records of the busiest of the
// four equal ranges of the hash space four members of a width-balanced
// group own, for records 0 … n-1 with keys keyOf(i).
func busiestQuarter(n int, keyOf func(i int) string, work func(*kafka.Message) time.Duration) (time.Duration, int) {
	var sums [4]time.Duration
	var counts [4]int
	for i := range n {
		q := uint64(ledger.Hash([]byte(keyOf(i)), int64(i))) * 4 / uint64(ledger.HashSpace)
		sums[q] += work(&kafka.Message{TopicPartition: kafka.TopicPartition{Offset: kafka.Offset(i)}})
		counts[q]++
	}
	top := 0
	for q := range sums {
		if sums[q] > sums[top] {
			top = q
		}
	}
	return sums[top], counts[top]
}

// runSettled starts m members × concurrency at the end of topic and waits
// until they have settled, then produces n records (record i's key is
// keyOf(i)) with a producer connected beforehand, and returns the time
// from the first record's Produce call to the last record handled. Each
// record's work is work's for its index in the run, so a run does the
// same work as records 0 … n-1 of a fresh topic.
func (c *benchCommand) runSettled(topic string, n, m, concurrency int, keyOf func(i int) string, work func(*kafka.Message) time.Duration) (time.Duration, error) {
	base, err := c.logEnd(topic)
	if err != nil {
		return 0, err
	}
	var s span
	ms, err := c.startMembers(topic, m, concurrency, "latest", func(ctx context.Context, msg *kafka.Message) error {
		at := *msg
		at.TopicPartition.Offset -= kafka.Offset(base)
		if err := worksleep.Sleep(ctx, work(&at)); err != nil {
			return err
		}
		s.hit()
		return nil
	})
	if err != nil {
		return 0, err
	}
	defer ms.stop()
	prod, err := c.producer(topic)
	if err != nil {
		return 0, err
	}
	defer prod.Close()
	start := time.Now()
	if err := produceWith(prod, topic, n, keyOf); err != nil {
		return 0, err
	}
	if err := s.wait(int64(n), 10*time.Minute); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last.Sub(start), nil
}

// logEnd returns partition 0's end offset of topic.
func (c *benchCommand) logEnd(topic string) (int64, error) {
	kc, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": c.brokers, "group.id": "keyshare-bench-log-end", "log_level": 3})
	if err != nil {
		return 0, err
	}
	defer kc.Close()
	_, hi, err := kc.QueryWatermarkOffsets(topic, 0, 10_000)
	return hi, err
}

// scaleOut measures throughput on 1 partition with M = 1, 2, 4, 8 members of
// 16 workers each and I/O-bound work (5 ms sleeps).
func (c *benchCommand) scaleOut(ctx context.Context) error {
	n := 20000
	if c.quick {
		n = 4000
	}
	if err := c.produceKeys("scale", n, func(i int) string { return fmt.Sprintf("key-%d", i%1000) }); err != nil {
		return err
	}
	work := func(*kafka.Message) time.Duration { return 5 * time.Millisecond }
	c.printf("## 2. Scale-out on one partition\n\n%d records over 1,000 keys in 1 partition; every member has 16 workers; each record sleeps 5 ms (I/O-bound). Efficiency = throughput ÷ (M × the 1-member throughput).\n\n| members | time | records/s | efficiency |\n|---|---|---|---|\n", n)
	var one float64
	for _, m := range []int{1, 2, 4, 8} {
		s, err := c.repeat(func() (time.Duration, error) { return c.runKeyshare("scale", n, m, 16, work) })
		if err != nil {
			return err
		}
		rate := float64(n) / s.med.Seconds()
		if m == 1 {
			one = rate
		}
		c.printf("| %d | %s | %.0f | %.0f%% |\n", m, s, rate, 100*rate/(float64(m)*one))
	}
	c.printf("\nGoal: ≥ 80%% up to the fetch ceiling. Every member fetches the whole partition and passes over the records of other members' ranges, so the ceiling is one consumer's fetch rate; the throughput here stays far below it.\n\n")
	return nil
}

// hotKey blocks one key for 5 s and measures the other keys' throughput
// against a run without the block, and what a vanilla consumer does meanwhile.
func (c *benchCommand) hotKey(ctx context.Context) error {
	n := 5000
	if err := c.produceKeys("hot", n, func(i int) string { return fmt.Sprintf("key-%d", i%100) }); err != nil {
		return err
	}
	others := n - n/100
	run := func(block bool) (time.Duration, error) { return c.othersWhileKey0Blocked("hot", block, others, nil) }
	base, err := c.repeat(func() (time.Duration, error) { return run(false) })
	if err != nil {
		return err
	}
	blocked, err := c.repeat(func() (time.Duration, error) { return run(true) })
	if err != nil {
		return err
	}
	c.printf("## 3. One hot key blocked for 5 s\n\n%d records over 100 keys, 1 partition, 1 member with 16 workers, 1 ms per record; the first record of key-0 blocks for 5 s. Throughput of the other %d records:\n\n| run | time | records/s of other keys | vs no block |\n|---|---|---|---|\n", n, others)
	c.printf("| keyshare, no block | %s | %.0f | 100%% |\n", base, float64(others)/base.med.Seconds())
	c.printf("| keyshare, key-0 blocked | %s | %.0f | %.0f%% |\n", blocked, float64(others)/blocked.med.Seconds(), 100*base.med.Seconds()/blocked.med.Seconds())
	c.printf("| vanilla consumer, key-0 blocked | — | 0 while blocked | 0%% for 5 s (one record at a time, in partition order) |\n")
	c.printf("\nGoal: ≥ 90%%.\n\n")
	return c.blockedKeyPastBound(ctx)
}

// othersWhileKey0Blocked runs one member with 16 workers over topic, 1 ms
// per record, the first record of key-0 blocking for 5 s if block, and
// returns how long the other keys' records (others of them) take.
func (c *benchCommand) othersWhileKey0Blocked(topic string, block bool, others int, set func(*consumer.Config)) (time.Duration, error) {
	var s span
	var blocked atomic.Bool
	ms, err := c.startMembersWith(topic, 1, 16, "earliest", func(cfg *consumer.Config) {
		if set != nil {
			set(cfg)
		}
		cfg.Handler = func(ctx context.Context, m *kafka.Message) error {
			if string(m.Key) == "key-0" {
				if block && blocked.CompareAndSwap(false, true) {
					return worksleep.Sleep(ctx, 5*time.Second)
				}
				return worksleep.Sleep(ctx, time.Millisecond)
			}
			if err := worksleep.Sleep(ctx, time.Millisecond); err != nil {
				return err
			}
			s.hit()
			return nil
		}
	})
	if err != nil {
		return 0, err
	}
	defer ms.stop()
	if err := s.wait(int64(others), 10*time.Minute); err != nil {
		return 0, err
	}
	return s.elapsed(), nil
}

// blockedKeyPastBound blocks a key with more records behind it than
// MaxInFlight, with MaxQueuedPerKey at its default and at MaxInFlight
// (the member before blocked keys' records could leave memory).
func (c *benchCommand) blockedKeyPastBound(ctx context.Context) error {
	n, keys := 20000, 10
	if c.quick {
		n = 12000 // still more than MaxInFlight records of key-0
	}
	if err := c.produceKeys("hot-deep", n, func(i int) string { return fmt.Sprintf("key-%d", i%keys) }); err != nil {
		return err
	}
	others := n - n/keys
	run := func(perKey int) (time.Duration, error) {
		return c.othersWhileKey0Blocked("hot-deep", true, others, func(cfg *consumer.Config) { cfg.MaxQueuedPerKey = perKey })
	}
	def, err := c.repeat(func() (time.Duration, error) { return run(0) })
	if err != nil {
		return err
	}
	off, err := c.repeat(func() (time.Duration, error) { return run(1000) })
	if err != nil {
		return err
	}
	c.printf("### 3b. The blocked key has more records than MaxInFlight\n\n%d records over %d keys (%d of key-0, more than MaxInFlight = 1,000), 1 partition, 1 member with 16 workers, 1 ms per record; the first record of key-0 blocks for 5 s. Time until the other %d records are handled:\n\n| MaxQueuedPerKey | time | records/s of other keys |\n|---|---|---|\n", n, keys, n/keys, others)
	c.printf("| default (100): key-0's records beyond 100 leave memory | %s | %.0f |\n", def, float64(others)/def.med.Seconds())
	c.printf("| 1,000 (= MaxInFlight: key-0 fills the bound, fetching stops) | %s | %.0f |\n\n", off, float64(others)/off.med.Seconds())
	c.printf("A key counts as blocked after a second without progress (docs/consumer.md, \"A blocked key\"), so with the default the member still sits at the in-flight bound for that second before key-0's records leave memory. With the bound at MaxInFlight it waits for the whole block.\n\n")
	return nil
}

// etcdCost measures ledger transactions and bytes per second at growing
// record rates.
func (c *benchCommand) etcdCost(ctx context.Context) error {
	secs := 5
	if c.quick {
		secs = 2
	}
	c.printf("## 4. etcd cost against record rate\n\n1 member, 1 partition, 100 keys, no work; records produced at a steady rate for %d s; flush interval 500 ms (the default).\n\n| records/s | ledger txns/s | ledger bytes/s | bytes per record |\n|---|---|---|---|\n", secs)
	var handled atomic.Int64
	ms, err := c.startMembers("rate", 1, 16, "latest", func(context.Context, *kafka.Message) error { handled.Add(1); return nil })
	if err != nil {
		return err
	}
	defer ms.stop()
	for _, rate := range []int{500, 2000, 8000} {
		st0 := ms.cs[0].Status()
		t0 := time.Now()
		n := rate * secs
		if _, err := loadgen.Produce(ctx, c.brokers, "rate", n, 100, 0, float64(rate), false); err != nil {
			return err
		}
		st1 := ms.cs[0].Status()
		d := time.Since(t0).Seconds()
		tx, by := float64(st1.Flushes-st0.Flushes)/d, float64(st1.FlushBytes-st0.FlushBytes)/d
		c.printf("| %d | %.1f | %.0f | %.2f |\n", rate, tx, by, by/float64(rate))
	}
	c.printf("\nTransactions per second stay at the flush rate however fast records come; bytes grow only with the pending list (records in flight at flush time).\n\n")
	return nil
}

// fetchAmplification measures records fetched ÷ records in the topic.
func (c *benchCommand) fetchAmplification(ctx context.Context) error {
	c.printf("## 6. Fetch amplification\n\nRecords fetched by all members ÷ records in the topic (500 per partition). Bound: (P + M − 1) ÷ P.\n\n| P | M | fetched ÷ produced | bound |\n|---|---|---|---|\n")
	for _, p := range []int{1, 4, 12} {
		topic := fmt.Sprintf("amp-%d", p)
		n := 500 * p
		for _, m := range []int{2, 8, 16} {
			var handled atomic.Int64
			// A fresh group starting at the end: it reads only what is
			// produced once it has settled.
			ms, err := c.startMembers(topic, m, 4, "latest", func(context.Context, *kafka.Message) error { handled.Add(1); return nil })
			if err != nil {
				return err
			}
			if err := c.produceKeys(topic, n, func(i int) string { return fmt.Sprintf("key-%d-%d", m, i) }); err != nil {
				return err
			}
			for handled.Load() < int64(n) {
				time.Sleep(10 * time.Millisecond)
			}
			var fetched int64
			for _, k := range ms.cs {
				fetched += k.Status().Fetched
			}
			ms.stop()
			c.printf("| %d | %d | %.2f | %.2f |\n", p, m, float64(fetched)/float64(n), float64(p+m-1)/float64(p))
		}
	}
	c.printf("\nMembers start and settle before they fetch, so these are steady-state reads; a rebalance while records flow adds re-reads from the new owners' watermarks.\n\n")
	return nil
}
