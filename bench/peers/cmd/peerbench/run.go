package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/bench/peers/checker"
	"github.com/keyshare/keyshare/internal/devcluster"
)

// peer is one configuration of one peer: kind, instances × concurrency.
type peer struct {
	kind      string // pc, share, plain, keyshare
	instances int
	conc      int // per instance
}

func (p peer) String() string {
	switch p.kind {
	case "pc":
		return fmt.Sprintf("Parallel Consumer, %d × %d", p.instances, p.conc)
	case "share":
		return fmt.Sprintf("share group, %d × %d consumers", p.instances, p.conc)
	case "plain":
		if p.instances == 1 {
			return "plain consumer group, 1 member"
		}
		return fmt.Sprintf("plain consumer group, %d members", p.instances)
	}
	return fmt.Sprintf("keyshare, %d × %d", p.instances, p.conc)
}

func (b *bench) peersFor(w *workload) []peer {
	all := []peer{{"pc", 1, 100}, {"pc", 4, 25}, {"share", 1, 100}, {"share", 4, 25}, {"plain", 1, 1}}
	if w.partitions > 1 {
		all = append(all, peer{"plain", int(w.partitions), 1})
	}
	all = append(all, peer{"keyshare", 1, 100}, peer{"keyshare", 4, 25})
	var out []peer
	for _, p := range all {
		for _, k := range b.peers {
			if p.kind == k {
				out = append(out, p)
			}
		}
	}
	return out
}

// instance is one running driver process.
type instance struct {
	name   string
	cmd    *exec.Cmd
	log    string
	done   chan struct{}
	killed bool
}

func (b *bench) spawn(p peer, i int, group, topic, dir, block string) (*instance, error) {
	name := fmt.Sprintf("%s-%d", p.kind, i)
	in := &instance{name: name, log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	common := []string{"--brokers", b.brokers, "--topic", topic, "--group", group, "--log", in.log, "--instance", name,
		"--concurrency", strconv.Itoa(p.conc), "--work-max-us", strconv.FormatInt(b.workMax, 10)}
	if block != "" {
		common = append(common, "--block", block)
	}
	java := func(module, class string, args ...string) *exec.Cmd {
		cp := filepath.Join(b.peersDir, module, "target", "peers-"+module+".jar") + string(os.PathListSeparator) + filepath.Join(b.peersDir, module, "target", "lib", "*")
		return exec.Command("java", append([]string{"-Xmx384m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", cp, class}, args...)...)
	}
	switch p.kind {
	case "pc":
		in.cmd = java("pc", "keyshare.peers.pc.PcDriver", common...)
	case "share":
		in.cmd = java("share", "keyshare.peers.share.ShareDriver", append(append([]string{"run"}, common...), strings.Fields(b.shareArgs)...)...)
	case "plain":
		in.cmd = exec.Command(b.driver, append([]string{"--mode", "plain"}, common...)...)
	case "keyshare":
		in.cmd = exec.Command(b.driver, append([]string{"--mode", "keyshare", "--etcd", b.etcd}, common...)...)
	}
	errf, err := os.Create(filepath.Join(dir, name+".stderr"))
	if err != nil {
		return nil, err
	}
	in.cmd.Stdout, in.cmd.Stderr = errf, errf
	if err := in.cmd.Start(); err != nil {
		errf.Close()
		return nil, err
	}
	live.Lock()
	live.m[in] = true
	live.Unlock()
	go func() {
		in.cmd.Wait()
		errf.Close()
		live.Lock()
		delete(live.m, in)
		live.Unlock()
		close(in.done)
	}()
	return in, nil
}

// live is every driver process running, for killAll.
var live = struct {
	sync.Mutex
	m map[*instance]bool
}{m: map[*instance]bool{}}

// killAll SIGKILLs every driver process still running (peerbench itself is
// being interrupted).
func killAll() {
	live.Lock()
	defer live.Unlock()
	for in := range live.m {
		_ = in.cmd.Process.Kill()
	}
}

// stop sends SIGTERM and waits up to grace, then SIGKILLs.
func (in *instance) stop(grace time.Duration) {
	select {
	case <-in.done:
		return
	default:
	}
	_ = in.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-in.done:
	case <-time.After(grace):
		_ = in.cmd.Process.Kill()
		<-in.done
	}
}

func (in *instance) kill() {
	in.killed = true
	_ = in.cmd.Process.Kill()
	<-in.done
}

// tail follows the record logs of a run.
type tail struct {
	off     map[string]int64
	seen    map[[2]int64]bool
	perInst map[string]int
}

func newTail() *tail {
	return &tail{off: map[string]int64{}, seen: map[[2]int64]bool{}, perInst: map[string]int{}}
}

func (t *tail) read(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(t.off[path], io.SeekStart); err != nil {
		return
	}
	b, _ := io.ReadAll(bufio.NewReader(f))
	last := bytes.LastIndexByte(b, '\n')
	if last < 0 {
		return
	}
	t.off[path] += int64(last + 1)
	for _, l := range strings.Split(string(b[:last]), "\n") {
		e, err := checker.ParseLine(l)
		if err != nil {
			continue
		}
		t.seen[[2]int64{int64(e.Partition), e.Offset}] = true
		inst, _, _ := strings.Cut(e.Instance, ".") // share: instance.consumer
		t.perInst[inst]++
	}
}

// outcome is one run of one peer.
type outcome struct {
	checker.Result
	others    time.Duration // hot-key workload: the records of keys other than key-0
	tail      time.Duration // streamed workload: from the end of production to the last record handled
	committed string        // "yes", or what was short
	timedOut  bool
}

// event is an action during a run, at a fraction of the production time of a
// streamed workload.
type event struct {
	at  float64
	act string // kill (the busiest live instance) or spawn (the remaining instances)
}

// stallTimeout ends a run in which no record was handled for this long;
// above share groups' 30 s acquisition lock, which holds a killed consumer's
// records that long.
const stallTimeout = 60 * time.Second

// streamWarmup is how long instances get to start before a stream begins.
const streamWarmup = 10 * time.Second

// stream is a workload produced while the peer runs: rate records/s for dur.
type stream struct {
	rate int
	dur  time.Duration
}

// runPeer runs one peer on the workload and checks its record log.
// initial is how many instances start (the rest start at a spawn event).
func (b *bench) runPeer(w *workload, p peer, initial int, events []event, st *stream) (outcome, error) {
	b.groups++
	group := fmt.Sprintf("peers-%s-%s-%d-%d", w.name, p.kind, b.groups, b.started.Unix())
	dir := filepath.Join(b.dir, group)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return outcome{}, err
	}
	var ins []*instance
	defer func() {
		for _, in := range ins {
			in.stop(time.Second)
		}
	}()
	startN := func(from, to int) error {
		for i := from; i < to; i++ {
			in, err := b.spawn(p, i, group, w.topic, dir, w.blockAt)
			if err != nil {
				return err
			}
			ins = append(ins, in)
		}
		return nil
	}
	if err := startN(0, initial); err != nil {
		return outcome{}, err
	}
	t := newTail()
	total := 0
	for _, e := range w.end {
		total += int(e)
	}
	produced := make(chan error, 1)
	var prodStart, prodEnd time.Time
	if st != nil {
		// Let the instances start and join (a JVM takes seconds here),
		// then produce while they run; the end offsets are known once it
		// is done.
		time.Sleep(streamWarmup)
		prodStart = time.Now()
		total = -1
		go func() { produced <- b.produce(w, st.rate) }()
	} else {
		close(produced)
	}
	timeout := time.Now().Add(4*time.Minute + time.Duration(b.records)*5*time.Millisecond)
	var out outcome
	recent := map[string]int{} // records per instance at the last tick, to find the busiest now
	busiest := map[string]int{}
	lastSeen, lastProgress := 0, time.Now()
	for total < 0 || len(t.seen) < total {
		if len(t.seen) != lastSeen {
			lastSeen, lastProgress = len(t.seen), time.Now()
		}
		// A peer that handles nothing for stallTimeout is stuck (seen:
		// Parallel Consumer after a rebalance), not slow.
		if time.Now().After(timeout) || (total >= 0 && time.Since(lastProgress) > stallTimeout) {
			out.timedOut = true
			b.logf("  gave up: %d of %d records handled, none for %s", len(t.seen), total, time.Since(lastProgress).Round(time.Second))
			break
		}
		time.Sleep(100 * time.Millisecond)
		if total < 0 {
			select {
			case err := <-produced:
				if err != nil {
					return out, err
				}
				prodEnd, total = time.Now(), 0
				for _, e := range w.end {
					total += int(e)
				}
			default:
			}
		}
		for _, in := range ins {
			t.read(in.log)
			busiest[in.name] = t.perInst[in.name] - recent[in.name]
			recent[in.name] = t.perInst[in.name]
		}
		for len(events) > 0 && st != nil && time.Since(prodStart) >= time.Duration(events[0].at*float64(st.dur)) {
			switch events[0].act {
			case "kill":
				// The live instance that handled the most records in
				// the last tick: one that is busy now.
				var victim *instance
				for _, in := range ins {
					if !in.killed && (victim == nil || busiest[in.name] > busiest[victim.name]) {
						victim = in
					}
				}
				if victim == nil || busiest[victim.name] == 0 {
					// Nobody is handling records yet (still joining):
					// wait for a busy instance to kill.
					goto waited
				}
				if b.verbose {
					b.logf("  SIGKILL %s at %d records handled", victim.name, len(t.seen))
				}
				victim.kill()
			case "spawn":
				if b.verbose {
					b.logf("  starting %d more instances at %d records handled", p.instances-initial, len(t.seen))
				}
				if err := startN(initial, p.instances); err != nil {
					return out, err
				}
			}
			events = events[1:]
		}
	waited:
		for _, in := range ins {
			select {
			case <-in.done:
				if !in.killed {
					in.killed = true
					b.logf("  %s exited early: see %s", in.name, filepath.Join(dir, in.name+".stderr"))
				}
			default:
			}
		}
	}
	// Give the group a moment to commit what it has done, then stop
	// every instance gracefully and read what the group committed.
	committed := b.committedShort
	if p.kind == "share" {
		committed = b.shareShort
	}
	if p.kind != "share" {
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) && committed(group, w) != "" {
			time.Sleep(250 * time.Millisecond)
		}
	}
	for _, in := range ins {
		in.stop(30 * time.Second)
	}
	if p.kind == "share" {
		// The share coordinator's state may trail the last
		// acknowledgements: give it the same 15 s after the stop.
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) && committed(group, w) != "" {
			time.Sleep(500 * time.Millisecond)
		}
	}
	var logs []string
	for _, in := range ins {
		logs = append(logs, in.log)
	}
	evs, err := checker.ReadLogs(logs...)
	if err != nil {
		return out, err
	}
	out.Result = checker.Check(evs, w.end)
	if !prodEnd.IsZero() {
		var last int64
		for _, e := range evs {
			last = max(last, e.End)
		}
		// Negative when the last record was handled before the tick that
		// saw the producer finish: the peer kept up.
		out.tail = max(0, time.UnixMicro(last).Sub(prodEnd))
	}
	if w.blockAt != "" {
		// The blocked record ends last for everyone: what tells the
		// peers apart is how long the other keys' records took.
		var others []checker.Event
		for _, e := range evs {
			if e.Key != "key-0" {
				others = append(others, e)
			}
		}
		out.others = checker.Check(others, w.end).Elapsed
	}
	if out.committed = committed(group, w); out.committed == "" {
		out.committed = "yes"
	}
	if p.kind == "share" {
		// What counts for a share group is the broker's answer to each
		// acknowledgement (the driver's commit callback); the start
		// offset and lag the admin API reports are shown beside it.
		var confirmed, failed, handled int64
		for _, in := range ins {
			if in.killed {
				continue
			}
			b, _ := os.ReadFile(filepath.Join(dir, in.name+".stderr"))
			for _, l := range strings.Split(string(b), "\n") {
				var c, f int64
				if n, _ := fmt.Sscanf(l, "acknowledgements confirmed %d failed %d", &c, &f); n == 2 {
					confirmed, failed = confirmed+c, failed+f
				}
			}
			for _, e := range evs {
				if strings.HasPrefix(e.Instance, in.name+".") {
					handled++
				}
			}
		}
		broker := "broker: lag 0, SPSO " + b.spso
		if out.committed != "yes" {
			broker = "broker: " + out.committed
		}
		if failed == 0 && confirmed == handled {
			out.committed = fmt.Sprintf("all acknowledged (%s)", broker)
		} else {
			out.committed = fmt.Sprintf("no: %d of %d handlings acknowledged, %d failed (%s)", confirmed, handled, failed, broker)
		}
	}
	return out, nil
}

// committedShort reads the group's committed offsets: "" when every
// partition's equals its end, else what is short.
func (b *bench) committedShort(group string, w *workload) string {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": b.brokers, "group.id": group, "log_level": 0})
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	var tps []kafka.TopicPartition
	for pt := range w.partitions {
		tps = append(tps, kafka.TopicPartition{Topic: &w.topic, Partition: pt})
	}
	got, err := c.Committed(tps, 10000)
	if err != nil {
		return "no: " + err.Error()
	}
	return short(w, func(pt int32) int64 {
		for _, tp := range got {
			if tp.Partition == pt {
				return int64(tp.Offset)
			}
		}
		return -1
	})
}

func short(w *workload, at func(int32) int64) string {
	var miss []string
	for pt := range w.partitions {
		if o := at(pt); o != w.end[pt] {
			if o < 0 {
				miss = append(miss, fmt.Sprintf("p%d none", pt))
			} else {
				miss = append(miss, fmt.Sprintf("p%d %d short", pt, w.end[pt]-o))
			}
		}
	}
	if len(miss) == 0 {
		return ""
	}
	return "no (" + strings.Join(miss, ", ") + ")"
}

// shareShort reads the share group's start offsets through the Java driver.
func (b *bench) shareShort(group string, w *workload) string {
	cp := filepath.Join(b.peersDir, "share/target/peers-share.jar") + ":" + filepath.Join(b.peersDir, "share/target/lib/*")
	out, err := exec.Command("java", "-cp", cp, "keyshare.peers.share.ShareDriver", "offsets", "--brokers", b.brokers,
		"--topic", w.topic, "--group", group, "--partitions", strconv.Itoa(int(w.partitions))).Output()
	if err != nil {
		return "no: " + err.Error()
	}
	// SPSO and lag per partition. The broker reports lag 0 once every
	// record is acknowledged; the SPSO itself can trail the end by the last
	// batch (seen here: 50 of 4,000), so the check is on lag.
	var miss, spsos []string
	seen := 0
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(l, "\t")
		if len(f) < 3 {
			continue
		}
		seen++
		pt, _ := strconv.Atoi(f[0])
		o, _ := strconv.ParseInt(f[1], 10, 64)
		spsos = append(spsos, fmt.Sprintf("p%d end−%d", pt, w.end[int32(pt)]-o))
		if f[2] != "0" {
			miss = append(miss, fmt.Sprintf("p%d lag %q", pt, f[2]))
		}
	}
	if seen < int(w.partitions) {
		miss = append(miss, fmt.Sprintf("%d of %d partitions reported", seen, w.partitions))
	}
	if len(miss) > 0 {
		return "no (" + strings.Join(miss, ", ") + ")"
	}
	b.spso = strings.Join(spsos, ", ")
	return ""
}

// spread formats the median and range of some numbers.
func spread(xs []float64, f func(float64) string) string {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	med := s[len(s)/2]
	if s[0] == s[len(s)-1] {
		return f(med)
	}
	return fmt.Sprintf("%s [%s–%s]", f(med), f(s[0]), f(s[len(s)-1]))
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func secs(x float64) string  { return fmt.Sprintf("%.2f s", x) }
func count(x float64) string { return strconv.FormatFloat(x, 'f', 0, 64) }

type series struct {
	time, others, tail, rate, steady, order, overlaps, dup, lost []float64
	committed                                                    []string
	timedOut                                                     bool
}

func (s *series) add(o outcome) {
	s.time = append(s.time, o.Elapsed.Seconds())
	s.rate = append(s.rate, float64(o.Handled)/o.Elapsed.Seconds())
	s.steady = append(s.steady, o.Steady)
	s.others = append(s.others, o.others.Seconds())
	s.tail = append(s.tail, o.tail.Seconds())
	s.order = append(s.order, float64(o.OrderViolations))
	s.overlaps = append(s.overlaps, float64(o.Overlaps))
	s.dup = append(s.dup, float64(o.Duplicate))
	s.lost = append(s.lost, float64(o.Lost))
	s.committed = append(s.committed, o.committed)
	s.timedOut = s.timedOut || o.timedOut
}

func (s *series) committedCell() string {
	bad := 0
	var why string
	for _, c := range s.committed {
		if c != "yes" && !strings.HasPrefix(c, "all acknowledged") {
			bad++
			why = c
		}
	}
	if bad == 0 {
		if strings.HasPrefix(s.committed[0], "all acknowledged") {
			return "all acknowledged"
		}
		return "yes"
	}
	return fmt.Sprintf("%d of %d runs %s", bad, len(s.committed), why)
}

// workload produces w's records, runs every peer on them runs times, and
// writes its table; it returns the goal rows for keyshare.
func (b *bench) workload(out *bytes.Buffer, w *workload) ([]string, error) {
	if err := b.produce(w, 0); err != nil {
		return nil, err
	}
	ideal := w.sumWork.Seconds() / 100
	peers := b.peersFor(w)
	res := make([]series, len(peers))
	for run := range b.runs {
		for i, p := range peers {
			b.logf("%s run %d/%d: %s", w.name, run+1, b.runs, p)
			o, err := b.runPeer(w, p, p.instances, nil, nil)
			if err != nil {
				return nil, err
			}
			b.logf("  %.2f s (others %.2f s), steady %.0f/s, %d handled, %d dup, %d lost, %d order, committed %s", o.Elapsed.Seconds(), o.others.Seconds(), o.Steady, o.Handled, o.Duplicate, o.Lost, o.OrderViolations, o.committed)
			res[i].add(o)
		}
	}
	fmt.Fprintf(out, "### %s\n\n%d records; Σwork = %.1f s, ideal at total concurrency 100 = %.2f s; the most work of one key (a floor for any key-ordered consumer) = %.2f s.\n\n",
		w.title, b.records, w.sumWork.Seconds(), ideal, w.keyFloor.Seconds())
	othersHead, othersSep := "", ""
	if w.blockAt != "" {
		othersHead, othersSep = " time, keys other than key-0 |", "---|"
	}
	fmt.Fprintf(out, "| peer | time |%s records/s | × ideal | steady records/s | order violations | duplicates | lost | committed = end |\n|---|---|%s---|---|---|---|---|---|---|\n", othersHead, othersSep)
	rates := map[string]float64{}
	for i, p := range peers {
		s := &res[i]
		name := p.String()
		if p.kind == "plain" || (p.kind == "pc" && p.instances > int(w.partitions)) {
			name += fmt.Sprintf(" (total concurrency %d)", min(p.instances, int(w.partitions))*p.conc)
		}
		if s.timedOut {
			name += " (stalled: gave up)"
		}
		othersCell := ""
		if w.blockAt != "" {
			othersCell = " " + spread(s.others, secs) + " |"
		}
		fmt.Fprintf(out, "| %s | %s |%s %.0f | %.2f | %.0f | %s | %s | %s | %s |\n", name, spread(s.time, secs), othersCell, median(s.rate), median(s.time)/ideal, median(s.steady),
			spread(s.order, count), spread(s.dup, count), spread(s.lost, count), s.committedCell())
		rates[p.String()] = median(s.rate)
		if w.blockAt != "" {
			// Everyone waits 5 s for the blocked record: compare the
			// other keys' time.
			rates[p.String()] = 1 / median(s.others)
		}
	}
	fmt.Fprintln(out)
	var goals []string
	for _, m := range []struct{ ks, pc, sh peer }{
		{peer{"keyshare", 1, 100}, peer{"pc", 1, 100}, peer{"share", 1, 100}},
		{peer{"keyshare", 4, 25}, peer{"pc", 4, 25}, peer{"share", 4, 25}},
	} {
		k, ok := rates[m.ks.String()]
		if !ok {
			continue
		}
		ratio := func(o peer) string {
			r, ok := rates[o.String()]
			if !ok || r == 0 {
				return "—"
			}
			return fmt.Sprintf("%.2f", k/r)
		}
		goals = append(goals, fmt.Sprintf("| %s | %d × %d | %s | %s |", w.name, m.ks.instances, m.ks.conc, ratio(m.pc), ratio(m.sh)))
	}
	return goals, nil
}

// failureRuns runs each peer with 4 instances on a 4-partition topic
// produced while it runs (a steady stream, so that the failure comes at a
// known time): once SIGKILLing the busiest instance at half the production
// time, once starting with 2 instances and adding 2 at 30%.
func (b *bench) failureRuns(out *bytes.Buffer) error {
	st := &stream{rate: b.streamRate, dur: b.streamDur}
	n := int(float64(st.rate) * st.dur.Seconds())
	fmt.Fprintf(out, "### Failures: a crash and a scale-out while records stream in\n\n4 partitions, 1,000 keys; %d records produced at %d records/s for %s while the peer runs (a fresh topic per run), starting %s after the instances; 4 instances × 25 (plain group: 4 members). **crash**: at half the production time the instance that handled the most records in the last 100 ms is SIGKILLed. **scale-out**: 2 instances start, 2 more join at 30%% of the production time (a graceful rebalance). Tail: from the last record produced to the last record handled. Overlaps: handlings that started while another handling of the same key was running, repeats included. Medians of %d run(s).\n\n", n, st.rate, st.dur, streamWarmup, b.nFailureRuns)
	fmt.Fprintf(out, "| event | peer | tail | duplicates | lost | order violations | overlaps | committed = end |\n|---|---|---|---|---|---|---|---|\n")
	for _, f := range b.failures {
		for _, p := range []peer{{"pc", 4, 25}, {"share", 4, 25}, {"plain", 4, 1}, {"keyshare", 4, 25}} {
			if !contains(b.peers, p.kind) {
				continue
			}
			var s series
			for run := range b.nFailureRuns {
				b.logf("%s run %d/%d: %s", f, run+1, b.nFailureRuns, p)
				b.groups++
				w := &workload{name: f, topic: fmt.Sprintf("peers-%s-%d-%d", f, b.groups, b.started.Unix()), partitions: 4,
					key: func(i int) string { return fmt.Sprintf("key-%d", i%1000) }}
				if err := devcluster.CreateTopics(b.brokers, map[string]int32{w.topic: 4}, 1); err != nil {
					return err
				}
				saved := b.records
				b.records = n
				var o outcome
				var err error
				switch f {
				case "crash":
					o, err = b.runPeer(w, p, 4, []event{{0.5, "kill"}}, st)
				case "scaleout":
					o, err = b.runPeer(w, p, 2, []event{{0.3, "spawn"}}, st)
				default:
					err = fmt.Errorf("unknown failure %q: want crash or scaleout", f)
				}
				b.records = saved
				if err != nil {
					return err
				}
				b.logf("  tail %.2f s, %d handled, %d dup, %d lost, %d order, %d overlaps, committed %s", o.tail.Seconds(), o.Handled, o.Duplicate, o.Lost, o.OrderViolations, o.Overlaps, o.committed)
				s.add(o)
			}
			name := p.String()
			if s.timedOut {
				name += " (stalled: gave up)"
			}
			fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", f, name, spread(s.tail, secs), spread(s.dup, count), spread(s.lost, count),
				spread(s.order, count), spread(s.overlaps, count), s.committedCell())
		}
	}
	fmt.Fprintln(out)
	return nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
