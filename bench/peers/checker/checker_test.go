package checker

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func ev(p int32, o int64, key string, start, end int64) Event {
	return Event{Topic: "t", Partition: p, Offset: o, Key: key, Attempt: 1, Start: start, End: end, Instance: "i"}
}

func TestCheck(t *testing.T) {
	end := map[int32]int64{0: 4}
	for _, tc := range []struct {
		name                       string
		evs                        []Event
		lost, dup, order, overlaps int
	}{
		{"in order", []Event{ev(0, 0, "a", 0, 10), ev(0, 1, "a", 10, 20), ev(0, 2, "b", 0, 5), ev(0, 3, "b", 6, 9)}, 0, 0, 0, 0},
		{"same key at once", []Event{ev(0, 0, "a", 0, 10), ev(0, 1, "a", 5, 20), ev(0, 2, "b", 0, 5), ev(0, 3, "b", 6, 9)}, 0, 0, 1, 1},
		{"same key reversed", []Event{ev(0, 1, "a", 0, 10), ev(0, 0, "a", 10, 20), ev(0, 2, "b", 0, 5), ev(0, 3, "b", 6, 9)}, 0, 0, 1, 0},
		{"other partition is another key", []Event{ev(0, 0, "a", 0, 10), ev(1, 0, "a", 5, 20), ev(0, 1, "b", 0, 5), ev(0, 2, "c", 0, 5), ev(0, 3, "d", 0, 5)}, 0, 0, 0, 0},
		{"replay after a crash is a duplicate, not a violation", []Event{ev(0, 0, "a", 0, 10), ev(0, 1, "a", 10, 20), ev(0, 0, "a", 30, 40), ev(0, 1, "a", 40, 50), ev(0, 2, "b", 0, 5), ev(0, 3, "b", 6, 9)}, 0, 2, 0, 0},
		{"lost", []Event{ev(0, 0, "a", 0, 10), ev(0, 3, "b", 6, 9)}, 2, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(tc.evs, end)
			if r.Lost != tc.lost || r.Duplicate != tc.dup || r.OrderViolations != tc.order || r.Overlaps != tc.overlaps {
				t.Errorf("lost %d dup %d order %d overlaps %d, want %d %d %d %d", r.Lost, r.Duplicate, r.OrderViolations, r.Overlaps, tc.lost, tc.dup, tc.order, tc.overlaps)
			}
		})
	}
}

func TestReadLogsSkipsCutLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	os.WriteFile(p, []byte("t\t0\t5\tkey-1\t1\t100\t200\tpc-0\nt\t0\t6\tkey-1\t1\t20"), 0o644)
	evs, err := ReadLogs(p)
	if err != nil || len(evs) != 1 || evs[0].Offset != 5 || evs[0].Key != "key-1" || evs[0].End != 200 {
		t.Fatalf("%v %+v", err, evs)
	}
}

// TestWorkMatchesJava pins values that keyshare.peers.Work (Java) printed
// for the same inputs.
func TestWorkMatchesJava(t *testing.T) {
	var sum int64
	for o := range int64(10000) {
		sum += WorkMicros(0, o, 5000)
	}
	got := fmt.Sprint(WorkMicros(0, 0, 5000), WorkMicros(0, 1, 5000), WorkMicros(3, 12345, 5000), sum)
	if want := "0 1946 2452 25067459"; got != want {
		t.Fatalf("work %s, want %s (as Java computes it)", got, want)
	}
}
