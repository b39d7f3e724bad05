package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
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
	f, err := parseReaderFlags(args)
	if err != nil {
		return err
	}
	var w readerWindow
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	read, closeReader, err := f.newReader(&w)
	if err != nil {
		return err
	}
	defer closeReader()

	out := json.NewEncoder(os.Stdout)
	in := bufio.NewScanner(os.Stdin)
	if err := awaitGo(out, in); err != nil {
		return err
	}
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if f.allocProfile != "" {
		runtime.MemProfileRate = 64 << 10
	}
	readErr := make(chan error, 1)
	go func() { readErr <- read(ctx) }()
	go followParent(in, &w, cancel) // stdin closes: stop
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
			if f.allocProfile != "" {
				if err := writeAllocProfile(f.allocProfile); err != nil {
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
