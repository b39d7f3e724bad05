package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/internal/keys"
)

// benchMember is a `keyshare member` child process with a metrics endpoint.
type benchMember struct {
	cmd     *exec.Cmd
	metrics string
}

func (c *benchCommand) spawnMember(topic, group, id string, extra ...string) (*benchMember, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	args := append([]string{"member", "--brokers", c.brokers, "--etcd", c.etcd, "--group", group, "--topic", topic,
		"--id", id, "--ttl", "2s", "--log-level", "error", "--metrics-addr", addr}, extra...)
	cmd := exec.Command(self, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &benchMember{cmd: cmd, metrics: addr}, nil
}

// metric reads one unlabelled sample (-1 if unavailable).
func (m *benchMember) metric(name string) float64 {
	resp, err := http.Get("http://" + m.metrics + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}

// peakRSS is the process's peak resident set size in bytes (VmHWM).
func (m *benchMember) peakRSS() int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", m.cmd.Process.Pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return -1
}

func (m *benchMember) stop(sig syscall.Signal) {
	_ = m.cmd.Process.Signal(sig)
	_ = m.cmd.Wait()
}

// memory measures a member process's peak RSS while it handles 1M records
// at the default in-flight bound.
func (c *benchCommand) memory(ctx context.Context) error {
	n := 1_000_000
	if c.quick {
		n = 100_000
	}
	m, err := c.spawnMember("memory", "bench-memory", "mem", "--concurrency", "16")
	if err != nil {
		return err
	}
	defer m.stop(syscall.SIGKILL)
	for m.metric("keyshare_generation") < 1 {
		time.Sleep(50 * time.Millisecond)
	}
	idle := m.peakRSS()
	if _, err := produce(ctx, c.brokers, "memory", n, 1000, 0, 0, false); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Minute)
	for m.metric("keyshare_records_handled_total") < float64(n) {
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: memory member handled %.0f of %d", m.metric("keyshare_records_handled_total"), n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	peak := m.peakRSS()
	c.printf("## 8. Memory\n\nOne `keyshare member` process (16 workers, the default in-flight bound of 1,000, librdkafka's default queue limits) handles %d records of about 20 bytes produced in advance, with no work per record.\n\n| peak RSS after joining | peak RSS over the run |\n|---|---|\n| %.1f MiB | %.1f MiB |\n\n", n, float64(idle)/(1<<20), float64(peak)/(1<<20))
	return nil
}

// pauses measures how long ranges stop making progress when a member is
// SIGKILLed (until its ranges make progress on their new owners), and on a
// graceful join for ranges that keep their owner and ranges that move.
func (c *benchCommand) pauses(ctx context.Context) error {
	group := "bench-pauses"
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcd}, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	schema := keys.New("/keyshare", group)
	var ms []*benchMember
	defer func() {
		for _, m := range ms {
			m.stop(syscall.SIGKILL)
		}
	}()
	for i := range 3 {
		m, err := c.spawnMember("pauses", group, fmt.Sprintf("p%d", i), "--work", "1ms", "--concurrency", "16")
		if err != nil {
			return err
		}
		ms = append(ms, m)
	}
	pctx, stopProd := context.WithCancel(ctx)
	defer stopProd()
	go func() { _, _ = produce(pctx, c.brokers, "pauses", 1_000_000, 500, 0, 2000, false) }()
	time.Sleep(4 * time.Second)

	// watch samples every range's watermark and returns, per range key, the
	// longest time its watermark stood still during the window, and its
	// owners at the start and the end.
	type rangeTrack struct {
		first, last string
		moved       time.Time
		wm          int64
		longest     time.Duration
	}
	watch := func(d time.Duration, act func()) (map[string]*rangeTrack, error) {
		tracks := map[string]*rangeTrack{}
		end := time.Now().Add(d)
		acted := false
		for time.Now().Before(end) {
			if !acted && time.Now().After(end.Add(-d+time.Second)) {
				act()
				acted = true
			}
			snap, err := coord.ReadSnapshot(ctx, cli, schema)
			if err != nil {
				return nil, err
			}
			now := time.Now()
			for _, r := range snap.Ranges {
				// Track hash space by partition and first hash of the
				// range as it was when first seen.
				w, ok := r.Entry.Watermark()
				if !ok {
					continue
				}
				k := fmt.Sprintf("%d/%d", r.Record.Partition, r.Record.Lo)
				t := tracks[k]
				if t == nil {
					t = &rangeTrack{first: r.Record.Owner, moved: now, wm: w}
					tracks[k] = t
				}
				t.last = r.Record.Owner
				if w != t.wm {
					t.wm, t.moved = w, now
				}
				t.longest = max(t.longest, now.Sub(t.moved))
			}
			time.Sleep(20 * time.Millisecond)
		}
		return tracks, nil
	}
	report := func(title string, tracks map[string]*rangeTrack, victim string) {
		var kept, moved time.Duration
		for _, t := range tracks {
			if t.first == t.last && t.first != victim {
				kept = max(kept, t.longest)
			} else {
				moved = max(moved, t.longest)
			}
		}
		c.printf("| %s | %.2f s | %.2f s |\n", title, kept.Seconds(), moved.Seconds())
	}
	c.printf("## 7. Pauses on failover and scale-out\n\nThree `keyshare member` processes (TTL 2 s, 16 workers, 1 ms per record) on 2 partitions, 2,000 records/s. The ledger watermark of every range is sampled every 20 ms from etcd; a pause is the longest time a range's watermark stood still (flushes come every 500 ms, so about 0.5 s is the floor). One run each.\n\n| event | longest pause, ranges that kept their owner | longest pause, ranges that moved |\n|---|---|---|\n")
	tracks, err := watch(8*time.Second, func() { ms[0].stop(syscall.SIGKILL) })
	if err != nil {
		return err
	}
	ms = ms[1:]
	report("SIGKILL of a member (p0)", tracks, "p0")
	tracks, err = watch(8*time.Second, func() {
		m, err := c.spawnMember("pauses", group, "p3", "--work", "1ms", "--concurrency", "16")
		if err == nil {
			ms = append(ms, m)
		}
	})
	if err != nil {
		return err
	}
	report("graceful join of a member (p3)", tracks, "")
	c.printf("\n")
	return nil
}
