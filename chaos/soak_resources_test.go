package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// resourceSample is one look at the members and etcd: the members' means
// (members come and go with the faults, so each sample averages the ones
// running) and the group's etcd state.
type resourceSample struct {
	at         time.Time
	rssMB      float64 // resident memory per member
	fds        float64 // open files per member
	goroutines float64 // per member (go_goroutines)
	etcdMB     float64 // etcd's database in use (history included)
	etcdKeys   float64 // keys under the group's root
	etcdBytes  float64 // their keys' and values' bytes
}

// sampleResources samples every `every` until ctx ends.
func (e *env) sampleResources(ctx context.Context, every time.Duration) []resourceSample {
	var out []resourceSample
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
		}
		if s, ok := e.sample(ctx); ok {
			out = append(out, s)
		}
	}
}

func (e *env) sample(ctx context.Context) (resourceSample, bool) {
	s := resourceSample{at: time.Now()}
	e.mu.Lock()
	pids := map[string]int{}
	for id, cmd := range e.procs {
		pids[id] = cmd.Process.Pid
	}
	e.mu.Unlock()
	n := 0
	for id, pid := range pids {
		rss, err1 := rssMB(pid)
		fds, err2 := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		g, err3 := goroutines(ctx, e.metricsAddr(id))
		if err1 != nil || err2 != nil || err3 != nil {
			continue // stopped, starting or leaving: left out of this sample
		}
		s.rssMB += rss
		s.fds += float64(len(fds))
		s.goroutines += g
		n++
	}
	if n == 0 {
		return s, false
	}
	s.rssMB, s.fds, s.goroutines = s.rssMB/float64(n), s.fds/float64(n), s.goroutines/float64(n)
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, ep := range e.cli.Endpoints() {
		if st, err := e.cli.Status(sctx, ep); err == nil {
			s.etcdMB = float64(st.DbSizeInUse) / (1 << 20)
			break
		}
	}
	resp, err := e.cli.Get(sctx, "/keyshare/"+group+"/", clientv3.WithPrefix())
	if err != nil {
		return s, false
	}
	s.etcdKeys = float64(resp.Count)
	for _, kv := range resp.Kvs {
		s.etcdBytes += float64(len(kv.Key) + len(kv.Value))
	}
	return s, true
}

// rssMB reads a process's resident memory from /proc.
func rssMB(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// goroutines reads go_goroutines from a member's /metrics.
func goroutines(ctx context.Context, addr string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			return strconv.ParseFloat(rest, 64)
		}
	}
	return 0, fmt.Errorf("no go_goroutines at %s", addr)
}

// slope is one resource's trend over a run.
type slope struct {
	name        string
	first, last float64 // the first and last samples after warm-up
	mean        float64 // after warm-up
	perMinute   float64 // least-squares slope after warm-up
	// judged: checkFlat holds it to no growth. etcd's database is not:
	// it keeps every revision until etcd compacts, which the test's
	// etcd never does (a production etcd runs auto-compaction).
	judged bool
}

// slopes fits a line to each resource over the samples after the first
// fifth of the run (start-up and the first faults' warm-up).
func slopes(samples []resourceSample) []slope {
	if len(samples) < 5 {
		return nil
	}
	rest := samples[len(samples)/5:]
	fields := []struct {
		name   string
		get    func(resourceSample) float64
		judged bool
	}{
		{"member RSS (MB)", func(s resourceSample) float64 { return s.rssMB }, true},
		{"member open files", func(s resourceSample) float64 { return s.fds }, true},
		{"member goroutines", func(s resourceSample) float64 { return s.goroutines }, true},
		{"etcd keys under the group", func(s resourceSample) float64 { return s.etcdKeys }, true},
		{"etcd bytes under the group", func(s resourceSample) float64 { return s.etcdBytes }, true},
		{"etcd database in use (MB)", func(s resourceSample) float64 { return s.etcdMB }, false},
	}
	var out []slope
	for _, f := range fields {
		var sx, sy, sxx, sxy float64
		n := float64(len(rest))
		for _, s := range rest {
			x, y := s.at.Sub(rest[0].at).Minutes(), f.get(s)
			sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
		}
		k := 0.0
		if d := n*sxx - sx*sx; d != 0 {
			k = (n*sxy - sx*sy) / d
		}
		out = append(out, slope{name: f.name, first: f.get(rest[0]), last: f.get(rest[len(rest)-1]), mean: sy / n, perMinute: k, judged: f.judged})
	}
	return out
}

// checkFlat fails a run of 10 minutes or more whose resources grow, by
// their trend after warm-up, by more than half their mean over the run:
// a leak grows without bound, a working set levels off (etcd's database,
// which keeps history until compacted, is reported only). Shorter runs only
// report their slopes: the warm-up dominates them.
func checkFlat(t *testing.T, dur time.Duration, samples []resourceSample) {
	if dur < 10*time.Minute {
		t.Logf("resources not judged: a %v run is too short to tell a leak from the warm-up", dur)
		return
	}
	for _, s := range slopes(samples) {
		if !s.judged {
			continue
		}
		if growth := s.perMinute * dur.Minutes(); growth > s.mean/2 {
			t.Errorf("%s grows %.3f per minute: %.1f over the run, more than half its mean %.1f", s.name, s.perMinute, growth, s.mean)
		}
	}
}
