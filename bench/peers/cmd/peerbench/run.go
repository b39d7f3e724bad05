package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/bench/peers/checker"
)

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
