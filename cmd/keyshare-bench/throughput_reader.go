package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/keyshare/keyshare/consumer"
)

// readerCommand is the child process of the throughput scenario: one reader
// (a bare confluent-kafka-go poll loop or a keyshare member) alone in its
// process, so that its CPU time is its own. It prints "ready" once set up,
// starts reading on a "go" line from stdin, prints a readerReport line
// every 100 ms and a last one when stdin closes, then exits. A "since N"
// line (unix ns) starts the latency count: every record produced at or
// after N (its timestamp) adds how long after its production the reader
// saw it — a bare loop when Poll returned it, a member when its handler
// started.
const readerCommand = "throughput-reader"

// readerReport is what a reader has done since its first record, as of the
// last record it saw: the process's CPU time and Go heap allocations over
// that window.
type readerReport struct {
	Ready    bool  `json:"ready,omitempty"`
	Handled  int64 `json:"handled"`
	First    int64 `json:"first"` // unix ns of the first record
	Last     int64 `json:"last"`  // unix ns of the last record
	CPUNanos int64 `json:"cpu_ns"`
	// RdkCPUNanos is the share of CPUNanos on librdkafka's threads; -1
	// where they were not found.
	RdkCPUNanos int64 `json:"rdk_cpu_ns"`
	Allocs      int64 `json:"allocs"`
	AllocBytes  int64 `json:"alloc_bytes"`
	// Since echoes the latest "since" line; Timed counts the records
	// produced since then, and the last report gives their latencies'
	// percentiles.
	Since     int64   `json:"since,omitempty"`
	Timed     int64   `json:"timed,omitempty"`
	P50Micros float64 `json:"p50_us,omitempty"`
	P99Micros float64 `json:"p99_us,omitempty"`
}

// usage is a sample of the process's CPU time (user+system, all threads,
// librdkafka's included), its librdkafka threads' share (-1 if none was
// found), and Go heap allocations.
type usage struct{ cpu, rdk, allocs, bytes int64 }

func sampleUsage() usage {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	rdk, threads, err := threadsCPU("/proc/self/task", librdkafkaThreads)
	if err != nil || threads == 0 {
		rdk = -1
	}
	return usage{
		cpu:    ru.Utime.Nano() + ru.Stime.Nano(),
		rdk:    rdk,
		allocs: int64(s[0].Value.Uint64()),
		bytes:  int64(s[1].Value.Uint64()),
	}
}

// rdkSince is librdkafka's threads' CPU between two samples, -1 if either
// found none.
func (u usage) rdkSince(first usage) int64 {
	if u.rdk < 0 || first.rdk < 0 {
		return -1
	}
	return u.rdk - first.rdk
}

// readerWindow follows the records a reader handles: the time and usage at
// the first, and at the last seen by the latest tick that saw new records.
type readerWindow struct {
	n           atomic.Int64
	first       atomic.Int64
	firstOnce   sync.Once
	firstUsage  usage
	last        int64
	lastUsage   usage
	lastCounted int64

	since atomic.Int64 // unix ns; 0: no latency count
	mu    sync.Mutex
	lat   []time.Duration // of the records produced since then
}

func (w *readerWindow) hit(m *kafka.Message) {
	w.firstOnce.Do(func() {
		w.firstUsage = sampleUsage()
		w.first.Store(time.Now().UnixNano())
	})
	w.n.Add(1)
	if since := w.since.Load(); since != 0 && m.Timestamp.UnixNano() >= since {
		d := time.Since(m.Timestamp)
		w.mu.Lock()
		w.lat = append(w.lat, d)
		w.mu.Unlock()
	}
}

// latency adds the latency count to r; with percentiles, their p50 and p99.
func (w *readerWindow) latency(r readerReport, percentiles bool) readerReport {
	w.mu.Lock()
	defer w.mu.Unlock()
	r.Since, r.Timed = w.since.Load(), int64(len(w.lat))
	if percentiles && len(w.lat) > 0 {
		slices.Sort(w.lat)
		at := func(q float64) float64 { return float64(w.lat[int(q*float64(len(w.lat)-1))]) / 1e3 }
		r.P50Micros, r.P99Micros = at(0.50), at(0.99)
	}
	return r
}

// tick notes the time and usage now if records came since the last tick,
// and returns the report so far.
func (w *readerWindow) tick() readerReport {
	if n := w.n.Load(); n != w.lastCounted && w.first.Load() != 0 {
		w.lastCounted, w.last, w.lastUsage = n, time.Now().UnixNano(), sampleUsage()
	}
	if w.last == 0 {
		return w.latency(readerReport{}, false)
	}
	return w.latency(readerReport{
		Handled: w.lastCounted, First: w.first.Load(), Last: w.last,
		CPUNanos:    w.lastUsage.cpu - w.firstUsage.cpu,
		RdkCPUNanos: w.lastUsage.rdkSince(w.firstUsage),
		Allocs:      w.lastUsage.allocs - w.firstUsage.allocs,
		AllocBytes:  w.lastUsage.bytes - w.firstUsage.bytes,
	}, false)
}

func runReader(args []string) error {
	fs := flag.NewFlagSet(readerCommand, flag.ContinueOnError)
	mode := fs.String("mode", "bare", "bare (a confluent-kafka-go poll loop) or keyshare (a member)")
	brokers := fs.String("brokers", "", "bootstrap servers")
	etcd := fs.String("etcd", "", "etcd endpoint (keyshare)")
	topic := fs.String("topic", "", "topic")
	partitions := fs.Int("partitions", 1, "bare: read the topic's partitions 0 to N-1")
	group := fs.String("group", "", "group")
	id := fs.String("id", "", "member id (keyshare)")
	start := fs.String("start", "beginning", "where reading starts: the partition's beginning, or its end (a keyshare member: a fresh group's AutoOffsetReset)")
	var props kvFlags
	fs.Var(&props, "X", "librdkafka property=value (repeatable)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the reading to this file")
	allocProfile := fs.String("allocprofile", "", "write an allocation profile of the reading to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *partitions < 1 {
		return fmt.Errorf("--partitions %d: want at least 1", *partitions)
	}
	from, reset := kafka.OffsetBeginning, consumer.OffsetEarliest
	switch *start {
	case "beginning":
	case "end":
		from, reset = kafka.OffsetEnd, consumer.OffsetLatest
	default:
		return fmt.Errorf("--start %q: want beginning or end", *start)
	}
	cm := kafka.ConfigMap{"bootstrap.servers": *brokers, "log_level": 3}
	for k, v := range props {
		cm[k] = v
	}
	var w readerWindow
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var read func(context.Context) error
	switch *mode {
	case "bare":
		cm["group.id"] = *group
		cm["enable.auto.commit"] = false
		kc, err := kafka.NewConsumer(&cm)
		if err != nil {
			return err
		}
		defer kc.Close()
		read = func(ctx context.Context) error {
			var tps []kafka.TopicPartition
			for p := range int32(*partitions) {
				tps = append(tps, kafka.TopicPartition{Topic: topic, Partition: p, Offset: from})
			}
			if err := kc.Assign(tps); err != nil {
				return err
			}
			for ctx.Err() == nil {
				if m, ok := kc.Poll(100).(*kafka.Message); ok && m.TopicPartition.Error == nil {
					w.hit(m)
				}
			}
			return nil
		}
	case "keyshare":
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{*etcd}, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer cli.Close()
		cfg := consumer.DefaultConfig()
		cfg.Group, cfg.Topics, cfg.MemberID, cfg.Kafka = *group, []string{*topic}, *id, cm
		cfg.AutoOffsetReset = reset
		cfg.Logger = hclog.NewNullLogger()
		cfg.Handler = func(_ context.Context, m *kafka.Message) error { w.hit(m); return nil }
		k, err := consumer.New(cli, cfg)
		if err != nil {
			return err
		}
		read = k.Run
	default:
		return fmt.Errorf("--mode %q: want bare or keyshare", *mode)
	}

	out := json.NewEncoder(os.Stdout)
	if err := out.Encode(readerReport{Ready: true}); err != nil {
		return err
	}
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() || in.Text() != "go" {
		return errors.New("no go line on stdin")
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *allocProfile != "" {
		runtime.MemProfileRate = 64 << 10
	}
	readErr := make(chan error, 1)
	go func() { readErr <- read(ctx) }()
	go func() {
		for in.Scan() { // stdin closes: stop
			if v, ok := strings.CutPrefix(in.Text(), "since "); ok {
				if ns, err := strconv.ParseInt(v, 10, 64); err == nil {
					w.since.Store(ns)
				}
			}
		}
		cancel()
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if err := out.Encode(w.tick()); err != nil {
				return err
			}
		case err := <-readErr:
			if err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			if *allocProfile != "" {
				f, err := os.Create(*allocProfile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
					return err
				}
			}
			return out.Encode(w.latency(w.tick(), true))
		}
	}
}

// kvFlags collects repeated prop=value flags.
type kvFlags map[string]string

func (f *kvFlags) String() string { return fmt.Sprint(map[string]string(*f)) }

func (f *kvFlags) Set(s string) error {
	for i := range len(s) {
		if s[i] == '=' {
			if *f == nil {
				*f = kvFlags{}
			}
			(*f)[s[:i]] = s[i+1:]
			return nil
		}
	}
	return fmt.Errorf("%q: want prop=value", s)
}

// listFlag collects a repeated flag's values.
type listFlag []string

func (f *listFlag) String() string { return strings.Join(*f, " ") }

func (f *listFlag) Set(s string) error {
	*f = append(*f, s)
	return nil
}
