package main

import (
	"strings"
	"testing"
	"time"
)

// TestCompareCounts: the check every row's counts pass is exact; a count
// one over (a record counted twice), one under (a record lost), a key
// missing and a key never produced each fail it, naming the key.
func TestCompareCounts(t *testing.T) {
	want := map[string]int{"a": 2, "b": 3}
	if got := compareCounts(map[string]int64{"a": 2, "b": 3}, want); got != "" {
		t.Errorf("exact counts: %q, want no complaint", got)
	}
	for name, c := range map[string]struct {
		got  map[string]int64
		says string
	}{
		"one over":  {map[string]int64{"a": 3, "b": 3}, "a: 3, want 2"},
		"one under": {map[string]int64{"a": 2, "b": 2}, "b: 2, want 3"},
		"missing":   {map[string]int64{"a": 2}, "b: 0, want 3"},
		"extra":     {map[string]int64{"a": 2, "b": 3, "c": 1}, "c: 1, want none"},
	} {
		msg := compareCounts(c.got, want)
		if !strings.Contains(msg, c.says) {
			t.Errorf("%s: %q, want it to say %q", name, msg, c.says)
		}
	}
}

// TestReached: a run waits until every key has at least its records'
// count, so that a count that goes over ends the wait and fails the check
// instead of stalling it.
func TestReached(t *testing.T) {
	want := map[string]int{"a": 2, "b": 3}
	if reached(map[string]int64{"a": 2, "b": 2}, want) {
		t.Error("reached with b short")
	}
	if !reached(map[string]int64{"a": 4, "b": 3}, want) {
		t.Error("not reached with a over and b complete")
	}
}

func TestParseStreamsStats(t *testing.T) {
	st, err := parseStreamsStats("first_us 1000000\nhandled 20000 last_us 101000000\n")
	if err != nil {
		t.Fatal(err)
	}
	if st != (streamsStats{first: 1000000, last: 101000000, handled: 20000}) {
		t.Errorf("%+v, want first 1000000, last 101000000, handled 20000", st)
	}
	if _, err := parseStreamsStats("first_us 1000000\n"); err == nil {
		t.Error("no error for an application killed before its last line")
	}
}

// TestSummarize: a row is its median run by rate, with the range, and its
// counts are exact only when every run's were.
func TestSummarize(t *testing.T) {
	run := func(secs int, counts string) row {
		return row{records: 1000, elapsed: time.Duration(secs) * time.Second, counts: counts}
	}
	r := summarize([]row{run(10, "exact"), run(5, "exact"), run(20, "exact")})
	if r.rate() != 100 || r.lowest != 50 || r.highest != 200 || r.runs != 3 || r.counts != "exact" {
		t.Errorf("%+v: want the run at 100 records/s, range 50–200, 3 runs, exact", r)
	}
	r = summarize([]row{run(10, "exact"), run(5, "1 of 2 keys wrong (a: 3, want 2)")})
	if !strings.Contains(r.counts, "run 2: 1 of 2 keys wrong") {
		t.Errorf("counts %q: want run 2's wrong count named", r.counts)
	}
}
