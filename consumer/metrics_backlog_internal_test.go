package consumer

import (
	"math"
	"testing"
	"time"
)

// TestPartitionBacklog: the backlog is end − committed (never below 0);
// its age runs from the first sample that showed the first uncommitted
// record; the rates are measured from the newest sample at least a rate
// window old.
func TestPartitionBacklog(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, tc := range []struct {
		name                    string
		hist                    []offsetSample
		cur                     offsetSample
		backlog                 int64
		age, arrival, drainRate float64
	}{
		{"no history", nil, offsetSample{at(0), 100, 40}, 60, 0, 0, 0},
		{"caught up", []offsetSample{{at(0), 100, 100}, {at(30), 160, 160}}, offsetSample{at(60), 220, 220}, 0, 0, 2, 2},
		// Offset 150 is the first uncommitted: it was first seen at 30 s.
		// The rates run from 30 s, the newest sample a minute old.
		{"behind", []offsetSample{{at(0), 100, 100}, {at(30), 160, 130}, {at(60), 220, 140}}, offsetSample{at(90), 280, 150}, 130, 60, 2, 20.0 / 60},
		// The rate runs from 20 s (the newest sample a minute old), not 0 s.
		{"long history", []offsetSample{{at(0), 0, 0}, {at(20), 100, 100}, {at(70), 200, 150}}, offsetSample{at(80), 400, 160}, 240, 10, 5, 1},
		// committed above end (a truncated log): no backlog, no negative rate.
		{"above end", []offsetSample{{at(0), 500, 500}}, offsetSample{at(60), 100, 500}, 0, 0, 0, 0},
		// The history does not reach back to the first uncommitted record
		// (a new leader): the age is bounded by the oldest sample.
		{"new leader", []offsetSample{{at(0), 1000, 10}}, offsetSample{at(15), 1030, 40}, 990, 15, 2, 2},
	} {
		backlog, age, arrival, drain := partitionBacklog(tc.hist, tc.cur, tc.cur.at)
		if backlog != tc.backlog || !near(age, tc.age) || !near(arrival, tc.arrival) || !near(drain, tc.drainRate) {
			t.Errorf("%s: backlog %d age %g arrival %g drain %g, want %d %g %g %g", tc.name, backlog, age, arrival, drain, tc.backlog, tc.age, tc.arrival, tc.drainRate)
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestBacklogHistory: samples closer than the spacing are not kept;
// samples the age and rates no longer need go; partitions no longer
// given are forgotten and their figures leave the group's sum; a long
// backlog is thinned to the bound and keeps its oldest sample.
func TestBacklogHistory(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	a, b := tp{Topic: "orders", Partition: 0}, tp{Topic: "orders", Partition: 1}
	var h backlogHistory
	h.observe(t0, map[tp]partitionGauges{a: {end: 100, committed: 100}, b: {end: -1}})
	f := h.observe(t0.Add(time.Second), map[tp]partitionGauges{a: {end: 150, committed: 100}})
	if len(h.parts[a]) != 1 {
		t.Errorf("a sample a second after the last was kept: %v", h.parts[a])
	}
	if f.Records != 50 || f.ArrivalPerSec != 50 {
		t.Errorf("figures %+v: want 50 records, arriving at 50/s", f)
	}
	if _, ok := h.parts[b]; ok {
		t.Errorf("partition with no end kept a history")
	}
	// Caught up for ten minutes: only the samples of the last minute and
	// the one before them stay.
	for s := 10; s <= 600; s += 10 {
		h.observe(t0.Add(time.Duration(s)*time.Second), map[tp]partitionGauges{a: {end: 100 + int64(s), committed: 100 + int64(s)}})
	}
	if n := len(h.parts[a]); n != 8 {
		t.Errorf("caught up: %d samples kept, want 8 (a minute at 10 s, and the one before)", n)
	}
	// Behind for longer than the bound allows at this step.
	for s := 610; s <= 610+10*backlogMaxSamples; s += 10 {
		h.observe(t0.Add(time.Duration(s)*time.Second), map[tp]partitionGauges{a: {end: 100 + int64(s), committed: 700}})
	}
	hist := h.parts[a]
	if len(hist) > backlogMaxSamples || hist[0].end > 700 {
		t.Errorf("long backlog: %d samples from end %d; want at most %d, from one at or below the committed 700", len(hist), hist[0].end, backlogMaxSamples)
	}
	last := t0.Add(time.Duration(610+10*backlogMaxSamples) * time.Second)
	f = h.observe(last, map[tp]partitionGauges{a: {end: 100 + 610 + 10*backlogMaxSamples, committed: 700}})
	// Thinned, the history shows the first record past 700 a step late.
	if want := last.Sub(t0.Add(610 * time.Second)).Seconds(); f.AgeSeconds > want || f.AgeSeconds < want-20 {
		t.Errorf("age %g s, want %g less at most two steps (since the first record past 700 arrived)", f.AgeSeconds, want)
	}
	if f = h.observe(last.Add(time.Minute), nil); f != (backlogFigures{}) || len(h.parts) != 0 {
		t.Errorf("no partitions (no longer leader): figures %+v, %d histories", f, len(h.parts))
	}
}
