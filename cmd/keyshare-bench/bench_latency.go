package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/cmd/internal/loadgen"
)

// latencyTopic is the latency table's topic: one partition, read from its
// end by each run's readers.
const latencyTopic = "latency"

// latencyRates are the production rates of the latency table, records/s,
// and latencySeconds how long each run produces at them.
var latencyRates = []int{1_000, 50_000}

const latencySeconds = 3

// latencyRun is one run's percentiles for each reader, in µs.
type latencyRun struct{ p50, p99 float64 }

// latency measures, at each rate in latencyRates, how long after its
// production a record reaches a bare confluent-kafka-go poll loop (Poll
// returns it) and a keyshare member (its handler starts), both reading the
// same records at once, each in a process of its own.
func (c *benchCommand) latency(ctx context.Context) error {
	c.printf("**Latency** from a record's production (its CreateTime, set by the producer's call; the producer lingers 1 ms) to a bare Poll loop's Poll returning it and to a keyshare member's handler starting (DefaultConfig, a fresh group at the log's end), both processes reading the same records at once; records of about 20 bytes over 10,000 keys produced at a steady rate for %d s; p50 and p99 of each run, the median run (by p99) and the range over %d runs. A member starts a record as soon as it is fetched: no flush or commit is on that path.\n\n", latencySeconds, c.runs)
	c.printf("| records/s | reader | p50 | p99 |\n|---|---|---|---|\n")
	for _, rate := range latencyRates {
		runs := [2][]latencyRun{}
		for range c.runs {
			r, err := c.latencyOnce(ctx, rate)
			if err != nil {
				return fmt.Errorf("latency at %d records/s: %w", rate, err)
			}
			runs[0], runs[1] = append(runs[0], r[0]), append(runs[1], r[1])
		}
		for i, name := range []string{"bare Poll loop, librdkafka defaults", "one keyshare member, defaults"} {
			rs := runs[i]
			sort.Slice(rs, func(a, b int) bool { return rs[a].p99 < rs[b].p99 })
			lo50, hi50 := rs[0].p50, rs[0].p50
			for _, r := range rs {
				lo50, hi50 = min(lo50, r.p50), max(hi50, r.p50)
			}
			mid := rs[len(rs)/2]
			c.printf("| %s | %s | %s [%s–%s] | %s [%s–%s] |\n", withCommas(int64(rate)), name,
				micros(mid.p50), micros(lo50), micros(hi50), micros(mid.p99), micros(rs[0].p99), micros(rs[len(rs)-1].p99))
		}
	}
	c.printf("\n")
	return nil
}

// micros writes a duration given in µs, as ms from 1 ms up.
func micros(us float64) string {
	if us >= 1_000 {
		return fmt.Sprintf("%.1f ms", us/1e3)
	}
	return fmt.Sprintf("%.0f µs", us)
}

// latencyOnce runs a bare reader and a member from the log's end, waits
// until both read records, then produces rate records/s for
// latencySeconds and returns each reader's percentiles.
func (c *benchCommand) latencyOnce(ctx context.Context, rate int) ([2]latencyRun, error) {
	var out [2]latencyRun
	group := fmt.Sprintf("latency-%d", c.groups.Add(1))
	var children readerChildren
	defer func() { children.kill() }()
	for i, mode := range []string{"bare", "keyshare"} {
		ch, err := c.spawnReader("", "--mode", mode, "--start", "end", "--brokers", c.brokers, "--etcd", c.etcd,
			"--topic", latencyTopic, "--group", fmt.Sprintf("%s-%d", group, i), "--id", "l0")
		if err != nil {
			return out, err
		}
		children = append(children, ch)
	}
	if err := children.startEach(); err != nil {
		return out, err
	}
	produce := func(n, rate int) error {
		_, err := loadgen.ProduceWith(ctx, kafka.ConfigMap{"bootstrap.servers": c.brokers, "acks": "all", "enable.idempotence": true, "linger.ms": 1, "log_level": 3},
			latencyTopic, loadgen.Options{Count: n, Keys: 10_000, Rate: float64(rate), Seed: 1})
		return err
	}
	reports := make([]readerReport, len(children))
	// A member reads from the log's end once its group has assigned its
	// range: records go out until both readers have seen one.
	warm := func() error { return produce(1, 0) }
	if err := children.until(reports, "both readers reading", time.Minute, warm, func(r readerReport) bool { return r.Handled > 0 }); err != nil {
		return out, err
	}
	if err := children.startLatencyCount(reports); err != nil {
		return out, err
	}
	n := rate * latencySeconds
	if err := produce(n, rate); err != nil {
		return out, err
	}
	if err := children.until(reports, "every record read", 2*time.Minute, idle, func(r readerReport) bool { return r.Timed >= int64(n) }); err != nil {
		return out, err
	}
	out, err := children.stopLatencies(reports)
	if err != nil {
		return out, err
	}
	children = nil // all exited
	return out, nil
}

// startEach tells each reader to start reading as soon as it is set up.
func (children readerChildren) startEach() error {
	for _, ch := range children {
		if err := ch.awaitReady(); err != nil {
			return err
		}
		if _, err := io.WriteString(ch.stdin, "go\n"); err != nil {
			return err
		}
	}
	return nil
}

// idle is a tick of until that does nothing.
func idle() error { return nil }

// until polls the readers' reports into reports until ok holds for every
// one, calling tick between polls; what names the wait in its error.
func (children readerChildren) until(reports []readerReport, what string, d time.Duration, tick func() error, ok func(readerReport) bool) error {
	deadline := time.Now().Add(d)
	for {
		all := true
		for i, ch := range children {
			select {
			case r := <-ch.latest:
				reports[i] = r
			case err := <-ch.done:
				return fmt.Errorf("reader exited: %v", err)
			default:
			}
			all = all && ok(reports[i])
		}
		if all {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s", what, d)
		}
		if err := tick(); err != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startLatencyCount tells the readers to count the latency of records
// produced from now on, and waits until both do.
func (children readerChildren) startLatencyCount(reports []readerReport) error {
	since := time.Now().UnixNano()
	for _, ch := range children {
		if _, err := fmt.Fprintf(ch.stdin, "since %d\n", since); err != nil {
			return err
		}
	}
	return children.until(reports, "the readers' latency count", 10*time.Second, idle, func(r readerReport) bool { return r.Since == since })
}

// stopLatencies stops the bare reader and the member in turn and returns
// the percentiles of their last reports.
func (children readerChildren) stopLatencies(reports []readerReport) ([2]latencyRun, error) {
	var out [2]latencyRun
	for i, ch := range children {
		ch.stdin.Close()
		select {
		case err := <-ch.done:
			if err != nil {
				return out, fmt.Errorf("reader: %w", err)
			}
		case <-time.After(time.Minute):
			return out, errors.New("reader did not stop within a minute")
		}
		select {
		case r := <-ch.latest:
			reports[i] = r
		default:
		}
		if reports[i].P99Micros == 0 {
			return out, fmt.Errorf("reader %d reported no latencies", i)
		}
		out[i] = latencyRun{p50: reports[i].P50Micros, p99: reports[i].P99Micros}
	}
	return out, nil
}
