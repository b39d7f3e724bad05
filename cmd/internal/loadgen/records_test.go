package loadgen

import (
	"strconv"
	"strings"
	"testing"
)

// draw returns n records' values from newRecords(seed, keys, zipf, first),
// and where the run leaves off.
func draw(seed uint64, first, n int) ([]string, int) {
	r := newRecords(seed, 10, 0, first)
	var out []string
	for range n {
		k, v := r.next()
		if !strings.HasPrefix(string(v), string(k)+":") {
			panic("value " + string(v) + " does not start with its key " + string(k))
		}
		out = append(out, string(v))
	}
	return out, r.nextSeq()
}

// TestRecordsSeedAndFirstSeq: the same seed draws the same keys, another
// seed others; values keep the "key-K:SEQ" form, each key's SEQ counting
// from FirstSeq, and a run started at the last run's nextSeq writes no
// value that run wrote.
func TestRecordsSeedAndFirstSeq(t *testing.T) {
	a, next := draw(7, 0, 200)
	if again, _ := draw(7, 0, 200); strings.Join(again, " ") != strings.Join(a, " ") {
		t.Errorf("seed 7 twice drew different records:\n%v\n%v", a, again)
	}
	if other, _ := draw(8, 0, 200); strings.Join(other, " ") == strings.Join(a, " ") {
		t.Error("seeds 7 and 8 drew the same records")
	}
	last := map[string]int{}
	for _, v := range a {
		k, s, _ := strings.Cut(v, ":")
		seq, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("value %q: SEQ is not a number", v)
		}
		if want, ok := last[k]; ok && seq != want+1 {
			t.Errorf("%s: SEQ %d after %d", k, seq, want)
		} else if !ok && seq != 0 {
			t.Errorf("%s: first SEQ %d, want 0", k, seq)
		}
		last[k] = seq
		if seq >= next {
			t.Errorf("%s: SEQ %d not below nextSeq %d", k, seq, next)
		}
	}
	b, _ := draw(7, next, 200)
	seen := map[string]bool{}
	for _, v := range a {
		seen[v] = true
	}
	for i, v := range b {
		if seen[v] {
			t.Fatalf("the second run's record %d, %q, repeats the first run's", i, v)
		}
	}
	if k, s, _ := strings.Cut(b[0], ":"); s != strconv.Itoa(next) {
		t.Errorf("the second run's first record %q: want %s:%d", b[0], k, next)
	}
}
