package schedule

import (
	"slices"
	"testing"
	"time"
)

// TestEvictBlocked: a key counts as blocked once BlockedAfter passes
// without a job of it taken; EvictBlocked then takes its jobs beyond the
// first keep out of its queue, oldest first, and leaves other keys alone.
func TestEvictBlocked(t *testing.T) {
	for _, tc := range []struct {
		name    string
		queued  int           // jobs of key "a" queued behind a running one
		keep    int           // EvictBlocked's bound
		elapsed time.Duration // since "a"'s running job was taken
		want    []int64       // offsets evicted
	}{
		{name: "not blocked yet", queued: 5, keep: 2, elapsed: BlockedAfter - time.Millisecond},
		{name: "blocked, beyond the bound", queued: 5, keep: 2, elapsed: BlockedAfter, want: []int64{3, 4, 5}},
		{name: "blocked, within the bound", queued: 2, keep: 2, elapsed: time.Hour},
		{name: "blocked, keep one", queued: 3, keep: 1, elapsed: time.Hour, want: []int64{2, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, clock := stepped(t)
			for o := range int64(tc.queued) + 1 {
				s.Submit("a", tj{"a", o})
			}
			if _, j, _ := s.Next(); j.o != 0 {
				t.Fatalf("took %v, want a@0", j)
			}
			*clock = clock.Add(tc.elapsed)
			// Another key, queued since just now: not blocked.
			for o := range int64(tc.queued) + 1 {
				s.Submit("b", tj{"b", o})
			}
			var got []int64
			for _, j := range s.EvictBlocked(tc.keep) {
				if j.key != "a" {
					t.Fatalf("evicted %v of a key not blocked", j)
				}
				got = append(got, j.o)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("evicted %v, want %v", got, tc.want)
			}
			if q, want := s.Queued("a"), tc.queued-len(tc.want); q != want {
				t.Fatalf("a has %d queued after eviction, want %d", q, want)
			}
			// What stays runs in order once the key moves again.
			s.Done("a")
			var next []int64
			for {
				k, j, ok := s.Next()
				if !ok {
					break
				}
				if k == "a" {
					next = append(next, j.o)
				}
				s.Done(k)
			}
			if want := int64(tc.queued - len(tc.want)); int64(len(next)) != want || (want > 0 && next[0] != 1) || !slices.IsSorted(next) {
				t.Fatalf("a ran %v after eviction, want 1..%d", next, want)
			}
		})
	}
}

// TestSubmitBounded: a blocked key with keep jobs queued refuses more; a
// key not blocked, or below the bound, or with no bound, takes them.
func TestSubmitBounded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		queued  int
		keep    int
		elapsed time.Duration
		want    bool
	}{
		{"blocked at the bound", 2, 2, BlockedAfter, false},
		{"blocked below the bound", 1, 2, BlockedAfter, true},
		{"at the bound, not blocked", 2, 2, BlockedAfter - time.Millisecond, true},
		{"no bound", 9, 0, time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, clock := stepped(t)
			s.Submit("a", tj{"a", 0})
			s.Next() // a@0 runs and does not finish
			for o := range tc.queued {
				s.Submit("a", tj{"a", int64(o + 1)})
			}
			*clock = clock.Add(tc.elapsed)
			if got := s.SubmitBounded("a", tj{"a", 99}, tc.keep); got != tc.want {
				t.Fatalf("SubmitBounded = %v, want %v", got, tc.want)
			}
			if want := tc.queued + map[bool]int{true: 1}[tc.want]; s.Queued("a") != want {
				t.Fatalf("%d queued, want %d", s.Queued("a"), want)
			}
		})
	}
}
