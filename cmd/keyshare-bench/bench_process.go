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

	"github.com/keyshare/keyshare/cmd/internal/loadgen"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
)

// benchMember is a `keyshare-bench member` child process (member.go: the
// member command keyshare member runs, with the lab's flags) with a
// metrics endpoint.
type benchMember struct {
	cmd     *exec.Cmd
	metrics string
}

func (c *benchCommand) spawnMember(topic, group, id string, extra ...string) (*benchMember, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := append([]string{memberCommand, "--brokers", c.brokers, "--etcd", c.etcd, "--group", group, "--topic", topic,
		"--id", id, "--ttl", "2s", "--log-level", "error", "--metrics-addr", addr}, extra...)
	cmd := exec.Command(self, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &benchMember{cmd: cmd, metrics: addr}, nil
}

// metric reads the sample of name (-1 if unavailable): a member's metrics
// carry its group as a label, and a member is in one group, so the first
// sample of name, labelled or not, is the one.
func (m *benchMember) metric(name string) float64 {
	resp, err := http.Get("http://" + m.metrics + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (!strings.HasPrefix(rest, " ") && !strings.HasPrefix(rest, "{")) {
			continue
		}
		f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return -1
		}
		return f
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

// cpuOf is the CPU time (user and system) process pid has used so far, at
// the kernel's clock tick; 0 if it cannot be read (the process is gone).
func cpuOf(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: utime and stime are the 12th and 13th of them.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b)[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * time.Second / clockTicks
}

// clockTicks is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on
// Linux's supported architectures).
const clockTicks = 100

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
	var idle, peak []time.Duration // bytes, carried in Durations to reuse stats
	for run := range c.runs {
		i, p, err := c.memoryRun(ctx, n, run)
		if err != nil {
			return err
		}
		idle, peak = append(idle, time.Duration(i)), append(peak, time.Duration(p))
	}
	mib := func(s stats) string {
		f := func(d time.Duration) float64 { return float64(d) / (1 << 20) }
		if s.lo == s.hi {
			return fmt.Sprintf("%.1f MiB", f(s.med))
		}
		return fmt.Sprintf("%.1f MiB [%.1f–%.1f]", f(s.med), f(s.lo), f(s.hi))
	}
	c.printf("## 8. Memory\n\nOne `keyshare-bench member` process (16 workers, the default in-flight bound of 1,000, librdkafka's default queue limits) handles %d records of about 20 bytes produced in advance, with no work per record.\n\n| peak RSS after joining | peak RSS over the run |\n|---|---|\n| %s | %s |\n\n", n, mib(summarize(idle)), mib(summarize(peak)))
	return nil
}

// memoryRun runs one member over n fresh records and returns its peak RSS
// after joining and at the end.
func (c *benchCommand) memoryRun(ctx context.Context, n, run int) (int64, int64, error) {
	group := fmt.Sprintf("bench-memory-%d", run)
	topic := fmt.Sprintf("memory-%d", run)
	m, err := c.spawnMember(topic, group, "mem", "--concurrency", "16")
	if err != nil {
		return 0, 0, err
	}
	defer m.stop(syscall.SIGKILL)
	joinBy := time.Now().Add(time.Minute)
	for m.metric("keyshare_generation") < 1 {
		if time.Now().After(joinBy) {
			return 0, 0, fmt.Errorf("bench: memory member did not join within a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Each run has its own topic, empty until now.
	idle := m.peakRSS()
	before := m.metric("keyshare_records_handled_total")
	if _, err := loadgen.Produce(ctx, c.brokers, topic, n, 1000, 0, 0, false); err != nil {
		return 0, 0, err
	}
	deadline := time.Now().Add(10 * time.Minute)
	for m.metric("keyshare_records_handled_total")-before < float64(n) {
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("bench: memory member handled %.0f of %d", m.metric("keyshare_records_handled_total")-before, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return idle, m.peakRSS(), nil
}

// pauses measures how long ranges stop making progress when a member is
// SIGKILLed (until its ranges make progress on their new owners), and on a
// graceful join for ranges that keep their owner and ranges that move.
func (c *benchCommand) pauses(ctx context.Context) error {
	var killKept, killMoved, joinKept, joinMoved []time.Duration
	for run := range c.runs {
		r, err := c.pausesRun(ctx, run)
		if err != nil {
			return err
		}
		killKept, killMoved = append(killKept, r[0]), append(killMoved, r[1])
		joinKept, joinMoved = append(joinKept, r[2]), append(joinMoved, r[3])
	}
	c.printf("## 7. Pauses on failover and scale-out\n\nThree `keyshare-bench member` processes (TTL 2 s, 16 workers, 1 ms per record) on 2 partitions, 2,000 records/s. The ledger watermark of every range is sampled every 20 ms from etcd; a pause is the longest time a range's watermark stood still (flushes come every 500 ms, so about 0.5 s is the floor).\n\n| event | longest pause, ranges that kept their owner | longest pause, ranges that moved |\n|---|---|---|\n")
	c.printf("| SIGKILL of a member | %s | %s |\n", summarize(killKept), summarize(killMoved))
	c.printf("| graceful join of a member | %s | %s |\n\n", summarize(joinKept), summarize(joinMoved))
	return nil
}

// pausesRun measures one SIGKILL and one join; it returns the longest pauses
// of kept and moved ranges for each.
func (c *benchCommand) pausesRun(ctx context.Context, run int) ([4]time.Duration, error) {
	var out [4]time.Duration
	group, topic := fmt.Sprintf("bench-pauses-%d", run), fmt.Sprintf("pauses-%d", run)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcd}, Logger: zap.NewNop()})
	if err != nil {
		return out, err
	}
	defer cli.Close()
	keys := schema.Group{Prefix: "", Name: group}.Keys()
	var ms []*benchMember
	defer func() {
		for _, m := range ms {
			m.stop(syscall.SIGKILL)
		}
	}()
	for i := range 3 {
		m, err := c.spawnMember(topic, group, fmt.Sprintf("p%d", i), "--work", "1ms", "--concurrency", "16")
		if err != nil {
			return out, err
		}
		ms = append(ms, m)
	}
	pctx, stopProd := context.WithCancel(ctx)
	defer stopProd()
	go func() { _, _ = loadgen.Produce(pctx, c.brokers, topic, 1_000_000, 500, 0, 2000, false) }()
	time.Sleep(4 * time.Second)

	watch := func(act func()) (pauseTracks, error) { return watchPauses(ctx, cli, keys, 8*time.Second, act) }
	tracks, err := watch(func() { ms[0].stop(syscall.SIGKILL) })
	if err != nil {
		return out, err
	}
	ms = ms[1:]
	out[0], out[1] = tracks.split("p0")
	tracks, err = watch(func() {
		m, err := c.spawnMember(topic, group, "p3", "--work", "1ms", "--concurrency", "16")
		if err == nil {
			ms = append(ms, m)
		}
	})
	if err != nil {
		return out, err
	}
	out[2], out[3] = tracks.split("")
	return out, nil
}

// rangeTrack is one range's watermark as watchPauses sampled it: its
// owners at the start and the end, when its watermark last moved, and the
// longest time it stood still.
type rangeTrack struct {
	first, last string
	moved       time.Time
	wm          int64
	longest     time.Duration
}

// pauseTracks is the tracks of a group's ranges by partition and first
// hash of the range as it was when first seen.
type pauseTracks map[string]*rangeTrack

// watchPauses samples every range's watermark every 20 ms for d, calling
// act a second in.
func watchPauses(ctx context.Context, cli *clientv3.Client, keys schema.Keys, d time.Duration, act func()) (pauseTracks, error) {
	tracks := pauseTracks{}
	end := time.Now().Add(d)
	acted := false
	for time.Now().Before(end) {
		if !acted && time.Now().After(end.Add(-d+time.Second)) {
			act()
			acted = true
		}
		snap, err := coord.ReadSnapshot(ctx, cli, groupOf(keys))
		if err != nil {
			return nil, err
		}
		tracks.sample(snap, time.Now())
		time.Sleep(20 * time.Millisecond)
	}
	return tracks, nil
}

// sample adds the ranges' watermarks in snap, read at now.
func (tracks pauseTracks) sample(snap *schema.Snapshot, now time.Time) {
	for _, r := range snap.Ranges {
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
}

// split is the longest pause of the ranges that kept their owner (other
// than victim), and of those that moved.
func (tracks pauseTracks) split(victim string) (kept, moved time.Duration) {
	for _, t := range tracks {
		if t.first == t.last && t.first != victim {
			kept = max(kept, t.longest)
		} else {
			moved = max(moved, t.longest)
		}
	}
	return kept, moved
}
