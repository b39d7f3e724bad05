package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/keyshare/keyshare/bench/peers/checker"
)

// peerRun is one run of one peer: its instances, their record logs and how
// many records each handled in the last tick.
type peerRun struct {
	b       *bench
	w       *workload
	p       peer
	initial int // instances started first; the rest start at a spawn event
	group   string
	dir     string
	ins     []*instance
	t       *tail
	recent  map[string]int // records per instance at the last tick
	busiest map[string]int // records per instance during the last tick
}

func (b *bench) newPeerRun(w *workload, p peer, initial int) (*peerRun, error) {
	b.groups++
	group := fmt.Sprintf("peers-%s-%s-%d-%d", w.name, p.kind, b.groups, b.started.Unix())
	dir := filepath.Join(b.dir, group)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &peerRun{
		b: b, w: w, p: p, initial: initial, group: group, dir: dir,
		t: newTail(), recent: map[string]int{}, busiest: map[string]int{},
	}, nil
}

// start starts instances from to to-1.
func (r *peerRun) start(from, to int) error {
	for i := from; i < to; i++ {
		in, err := r.b.spawn(r.p, i, r.group, r.w.topic, r.dir, r.w.blockAt)
		if err != nil {
			return err
		}
		r.ins = append(r.ins, in)
	}
	return nil
}

// stopAll stops every instance, giving each grace to exit.
func (r *peerRun) stopAll(grace time.Duration) {
	for _, in := range r.ins {
		in.stop(grace)
	}
}

// totalRecords is how many records the workload's end offsets hold.
func totalRecords(w *workload) int {
	total := 0
	for _, e := range w.end {
		total += int(e)
	}
	return total
}

// watch follows the instances' logs until every record is handled or the
// run stalls, firing events on the way. It returns when a streamed
// workload's production ended (zero otherwise) and whether it gave up.
func (r *peerRun) watch(events []event, st *stream) (prodEnd time.Time, gaveUp bool, err error) {
	total := totalRecords(r.w)
	produced := make(chan error, 1)
	var prodStart time.Time
	if st != nil {
		// Let the instances start and join (a JVM takes seconds here),
		// then produce while they run; the end offsets are known once it
		// is done.
		time.Sleep(streamWarmup)
		prodStart = time.Now()
		total = -1
		go func() { produced <- r.b.produce(r.w, st.rate) }()
	} else {
		close(produced)
	}
	timeout := time.Now().Add(4*time.Minute + time.Duration(r.b.records)*5*time.Millisecond)
	lastSeen, lastProgress := 0, time.Now()
	for total < 0 || len(r.t.seen) < total {
		if len(r.t.seen) != lastSeen {
			lastSeen, lastProgress = len(r.t.seen), time.Now()
		}
		// A peer that handles nothing for stallTimeout is stuck (seen:
		// Parallel Consumer after a rebalance), not slow.
		if time.Now().After(timeout) || (total >= 0 && time.Since(lastProgress) > stallTimeout) {
			r.b.logf("  gave up: %d of %d records handled, none for %s", len(r.t.seen), total, time.Since(lastProgress).Round(time.Second))
			return prodEnd, true, nil
		}
		time.Sleep(100 * time.Millisecond)
		if total < 0 {
			select {
			case err := <-produced:
				if err != nil {
					return prodEnd, false, err
				}
				prodEnd, total = time.Now(), totalRecords(r.w)
			default:
			}
		}
		r.readLogs()
		if st != nil {
			if events, err = r.fire(events, prodStart, st.dur); err != nil {
				return prodEnd, false, err
			}
		}
		r.noteEarlyExits()
	}
	return prodEnd, false, nil
}

// readLogs reads what each instance logged since the last tick.
func (r *peerRun) readLogs() {
	for _, in := range r.ins {
		r.t.read(in.log)
		r.busiest[in.name] = r.t.perInst[in.name] - r.recent[in.name]
		r.recent[in.name] = r.t.perInst[in.name]
	}
}

// fire acts on the events whose time in the stream of length dur has
// come, and returns those still to come. A kill waits while no instance
// is handling records yet (still joining).
func (r *peerRun) fire(events []event, prodStart time.Time, dur time.Duration) ([]event, error) {
	for len(events) > 0 && time.Since(prodStart) >= time.Duration(events[0].at*float64(dur)) {
		switch events[0].act {
		case "kill":
			victim := r.busiestLive()
			if victim == nil {
				return events, nil
			}
			if r.b.verbose {
				r.b.logf("  SIGKILL %s at %d records handled", victim.name, len(r.t.seen))
			}
			victim.kill()
		case "spawn":
			if r.b.verbose {
				r.b.logf("  starting %d more instances at %d records handled", r.p.instances-r.initial, len(r.t.seen))
			}
			if err := r.start(r.initial, r.p.instances); err != nil {
				return events, err
			}
		}
		events = events[1:]
	}
	return events, nil
}

// busiestLive is the live instance that handled the most records in the
// last tick, one that is busy now; nil when none handled any.
func (r *peerRun) busiestLive() *instance {
	var victim *instance
	for _, in := range r.ins {
		if !in.killed && (victim == nil || r.busiest[in.name] > r.busiest[victim.name]) {
			victim = in
		}
	}
	if victim == nil || r.busiest[victim.name] == 0 {
		return nil
	}
	return victim
}

// noteEarlyExits marks and reports instances that exited on their own.
func (r *peerRun) noteEarlyExits() {
	for _, in := range r.ins {
		select {
		case <-in.done:
			if !in.killed {
				in.killed = true
				r.b.logf("  %s exited early: see %s", in.name, filepath.Join(r.dir, in.name+".stderr"))
			}
		default:
		}
	}
}

// settle gives the group a moment to commit what it has done, stops every
// instance gracefully and returns the reader of what the group committed.
func (r *peerRun) settle() func(group string, w *workload) string {
	committed := r.b.committedShort
	if r.p.kind == "share" {
		committed = r.b.shareShort
	}
	if r.p.kind != "share" {
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) && committed(r.group, r.w) != "" {
			time.Sleep(250 * time.Millisecond)
		}
	}
	r.stopAll(30 * time.Second)
	if r.p.kind == "share" {
		// The share coordinator's state may trail the last
		// acknowledgements: give it the same 15 s after the stop.
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) && committed(r.group, r.w) != "" {
			time.Sleep(500 * time.Millisecond)
		}
	}
	return committed
}

// logs is the path of every instance's record log.
func (r *peerRun) logs() []string {
	var logs []string
	for _, in := range r.ins {
		logs = append(logs, in.log)
	}
	return logs
}

// tailAfter is how long after prodEnd the last record was handled; zero
// when the peer kept up (the last record was handled before the tick that
// saw the producer finish) or nothing was streamed.
func tailAfter(evs []checker.Event, prodEnd time.Time) time.Duration {
	if prodEnd.IsZero() {
		return 0
	}
	var last int64
	for _, e := range evs {
		last = max(last, e.End)
	}
	return max(0, time.UnixMicro(last).Sub(prodEnd))
}

// othersElapsed is how long the records of keys other than the blocked
// key-0 took: the blocked record ends last for everyone, so this is what
// tells the peers apart.
func othersElapsed(evs []checker.Event, end map[int32]int64) time.Duration {
	var others []checker.Event
	for _, e := range evs {
		if e.Key != "key-0" {
			others = append(others, e)
		}
	}
	return checker.Check(others, end).Elapsed
}

// shareAcknowledged says whether a share group's broker confirmed every
// handling. What counts for a share group is the broker's answer to each
// acknowledgement (the driver's commit callback); brokerShort, the start
// offset and lag the admin API reports, is shown beside it.
func (r *peerRun) shareAcknowledged(evs []checker.Event, brokerShort string) string {
	var confirmed, failed, handled int64
	for _, in := range r.ins {
		if in.killed {
			continue
		}
		stderr, _ := os.ReadFile(filepath.Join(r.dir, in.name+".stderr"))
		for _, l := range strings.Split(string(stderr), "\n") {
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
	broker := "broker: lag 0, SPSO " + r.b.spso
	if brokerShort != "yes" {
		broker = "broker: " + brokerShort
	}
	if failed == 0 && confirmed == handled {
		return fmt.Sprintf("all acknowledged (%s)", broker)
	}
	return fmt.Sprintf("no: %d of %d handlings acknowledged, %d failed (%s)", confirmed, handled, failed, broker)
}
