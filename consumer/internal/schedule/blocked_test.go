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
			if _, j, _, _ := s.Next(); j.o != 0 {
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
				k, j, _, ok := s.Next()
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

// TestSubmitBlocked: a blocked key with keep jobs queued refuses more; a
// key not blocked, or below the bound, or with no bound, takes them.
func TestSubmitBlocked(t *testing.T) {
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
			if got := submitOne(s, "a", tj{"a", 99}, tc.keep, *clock); got != tc.want {
				t.Fatalf("queued = %v, want %v", got, tc.want)
			}
			if want := tc.queued + map[bool]int{true: 1}[tc.want]; s.Queued("a") != want {
				t.Fatalf("%d queued, want %d", s.Queued("a"), want)
			}
		})
	}
}

// steppedBatcher is a Batcher without workers, batches of size jobs, on a
// clock the test moves.
func steppedBatcher(t *testing.T, size int) (*Batcher[key, tj], *time.Time) {
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := NewBatcher[key, tj](0, size, 0, nil)
	s.SetClock(func() time.Time { return clock })
	t.Cleanup(s.Close)
	return s, &clock
}

// TestBatcherEvictBlocked: a key a batch holds counts as blocked once
// BlockedAfter passes since the batch took its jobs; EvictBlocked takes
// the key's queued jobs beyond the first keep (not those in the batch),
// and what stays runs after the batch's put-back jobs, in order.
func TestBatcherEvictBlocked(t *testing.T) {
	const size = 2 // the batch takes a@0 and a@1
	for _, tc := range []struct {
		name    string
		queued  int           // jobs of key "a" queued behind the batch's
		keep    int           // EvictBlocked's bound
		elapsed time.Duration // since the batch took a's jobs
		want    []int64       // offsets evicted
	}{
		{name: "not blocked yet", queued: 4, keep: 2, elapsed: BlockedAfter - time.Millisecond},
		{name: "blocked, beyond the bound", queued: 4, keep: 2, elapsed: BlockedAfter, want: []int64{4, 5}},
		{name: "blocked, within the bound", queued: 2, keep: 2, elapsed: time.Hour},
		{name: "blocked, keep one", queued: 3, keep: 1, elapsed: time.Hour, want: []int64{3, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, clock := steppedBatcher(t, size)
			for o := range int64(size + tc.queued) {
				s.Submit("a", tj{"a", o})
			}
			b := s.TakeBatch()
			if got := describe(b.Jobs()); !slices.Equal(got, []string{"a@0", "a@1"}) {
				t.Fatalf("batch %v, want [a@0 a@1]", got)
			}
			*clock = clock.Add(tc.elapsed)
			// Another key, queued since just now: not blocked.
			for o := range int64(size + tc.queued) {
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
			// a@0 done, a@1 put back: it runs first, then what stayed.
			b.Release("a", []tj{{"a", 1}})
			var next []int64
			for {
				nb := s.TakeBatch()
				if len(nb.Jobs()) == 0 {
					break
				}
				for _, j := range nb.Jobs() {
					if j.key == "a" {
						next = append(next, j.o)
					}
				}
				for _, k := range nb.Keys() {
					nb.Release(k, nil)
				}
			}
			want := []int64{1}
			for o := range int64(tc.queued - len(tc.want)) {
				want = append(want, size+o)
			}
			if !slices.Equal(next, want) {
				t.Fatalf("a ran %v after eviction, want %v", next, want)
			}
			if !s.Idle() {
				t.Fatal("not idle after every batch was released")
			}
		})
	}
}

// TestBatcherSubmitBlocked: a key a batch holds, blocked with keep jobs
// queued, refuses more; once a batch takes its jobs again it is not
// blocked and takes them.
func TestBatcherSubmitBlocked(t *testing.T) {
	s, clock := steppedBatcher(t, 2)
	for o := range int64(4) {
		s.Submit("a", tj{"a", o})
	}
	b := s.TakeBatch() // a@0, a@1; a@2 and a@3 queued
	*clock = clock.Add(BlockedAfter)
	steps := []struct {
		name   string
		do     func()
		keep   int
		want   bool
		queued int // a's queued jobs after the step
	}{
		{"blocked at the bound", func() {}, 2, false, 2},
		{"blocked, a larger bound", func() {}, 3, true, 3},
		{"taken again: not blocked", func() {
			b.Release("a", nil)
			b = s.TakeBatch() // a@2, a@3; a@99 stays queued
		}, 1, true, 2},
	}
	for _, st := range steps {
		st.do()
		if got := submitOne(s, "a", tj{"a", 99}, st.keep, *clock); got != st.want {
			t.Fatalf("%s: queued = %v, want %v", st.name, got, st.want)
		}
		if q := s.Queued("a"); q != st.queued {
			t.Fatalf("%s: %d queued, want %d", st.name, q, st.queued)
		}
	}
	if got := describe(b.Jobs()); !slices.Equal(got, []string{"a@2", "a@3"}) {
		t.Fatalf("the second batch took %v, want [a@2 a@3]", got)
	}
}

// submitOne submits one job with SubmitAll and reports whether it was
// queued.
func submitOne(s interface {
	SubmitAll([]key, []tj, int, time.Time, []bool)
}, k key, j tj, keep int, at time.Time) bool {
	queued := []bool{false}
	s.SubmitAll([]key{k}, []tj{j}, keep, at, queued)
	return queued[0]
}
