package main

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/keyshare/keyshare/internal/devcluster"
)

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
