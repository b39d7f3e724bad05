package schedule

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestBatchFormation: batches hold at most the batch size of jobs; a key's
// jobs in a batch are consecutive jobs of that key in offset order;
// a key is never in two batches at once; every job runs exactly once;
// a batch gathers jobs that arrive within the batch wait.
func TestBatchFormation(t *testing.T) {
	const size = 7
	var mu sync.Mutex
	running := map[key]int{} // batches holding the key now
	var errs []string
	next := map[key]int64{} // the key's next expected offset
	var batches [][]tj
	var wg sync.WaitGroup
	s := NewBatcher[key](4, size, 5*time.Millisecond, func(b *Batch[key, tj]) {
		mu.Lock()
		batches = append(batches, b.jobs)
		if len(b.jobs) == 0 || len(b.jobs) > size {
			errs = append(errs, fmt.Sprintf("batch of %d jobs", len(b.jobs)))
		}
		seen := map[key]bool{}
		for _, j := range b.jobs {
			if !seen[j.key] {
				seen[j.key] = true
				if running[j.key]++; running[j.key] > 1 {
					errs = append(errs, fmt.Sprintf("key %s in two batches at once", j.key))
				}
			}
			if j.o != next[j.key] {
				errs = append(errs, fmt.Sprintf("key %s: offset %d, want %d", j.key, j.o, next[j.key]))
			}
			next[j.key] = j.o + 1
		}
		mu.Unlock()
		time.Sleep(time.Millisecond) // overlap with other workers' batches
		mu.Lock()
		for k := range seen {
			running[k]--
		}
		mu.Unlock()
		for range b.jobs {
			wg.Done()
		}
	})
	t.Cleanup(s.Close)
	// Offsets here count per key (the test's own order check).
	keys := []key{"a", "b", "c", "hot"}
	var offs = map[key]int64{}
	n := 0
	for i := range 400 {
		k := keys[i%3]
		if i%2 == 0 {
			k = "hot"
		}
		wg.Add(1)
		s.Submit(k, tj{k, offs[k]})
		offs[k]++
		n++
		if i%50 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, e := range errs {
		t.Error(e)
	}
	total, full := 0, 0
	for _, b := range batches {
		total += len(b)
		if len(b) == size {
			full++
		}
	}
	if total != n {
		t.Fatalf("%d jobs ran, want %d", total, n)
	}
	t.Logf("%d jobs in %d batches (%d full)", n, len(batches), full)

	// Jobs that arrive within the batch wait join the batch.
	got := make(chan []tj, 4)
	s2 := NewBatcher[key](2, 10, time.Second, func(b *Batch[key, tj]) { got <- slices.Clone(b.jobs) })
	t.Cleanup(s2.Close)
	s2.Submit("x", tj{"x", 0})
	time.Sleep(20 * time.Millisecond)
	s2.Submit("y", tj{"y", 0})
	s2.Submit("x", tj{"x", 1}) // x is held by the forming batch: it joins it after x's first
	for i := range 7 {
		k := key(fmt.Sprint("z", i))
		s2.Submit(k, tj{k, 0})
	}
	select {
	case b := <-got:
		d := describe(b)
		if len(b) != 10 || d[0] != "x@0" || !slices.Contains(d, "x@1") {
			t.Fatalf("batch %v: want x@0 first, x@1 after it, and 8 more (it fills before the wait ends)", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no batch")
	}
}

func describe(b []tj) []string {
	var out []string
	for _, j := range b {
		out = append(out, j.String())
	}
	return out
}

// TestBatchReleasePutsBack: jobs released back into their key's queue
// run again, first among the key's jobs, in order; a key is held until
// released.
func TestBatchReleasePutsBack(t *testing.T) {
	got := make(chan []string, 8)
	first := true
	var mu sync.Mutex
	s := NewBatcher[key](2, 10, 0, func(b *Batch[key, tj]) {
		got <- describe(b.jobs)
		mu.Lock()
		defer mu.Unlock()
		if first {
			first = false
			// Keep a@0, put a@1 and a@2 back.
			b.Release(b.jobs[0].key, []tj{b.jobs[1], b.jobs[2]})
		}
	})
	t.Cleanup(s.Close)
	s.mu.Lock() // submit all three before any worker looks
	for o := range 3 {
		s.submitLocked("a", tj{"a", int64(o)}, 0, s.now())
	}
	s.mu.Unlock()
	want := [][]string{{"a@0", "a@1", "a@2"}, {"a@1", "a@2"}}
	for _, w := range want {
		select {
		case b := <-got:
			if !slices.Equal(b, w) {
				t.Fatalf("batch %v, want %v", b, w)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no batch; want %v", w)
		}
	}
}

// TestTakeBatchStep: taken step by step, a batch takes ready keys' jobs
// up to its size, in order per key; a key stays held until released, and
// jobs put back run first, in order.
func TestTakeBatchStep(t *testing.T) {
	s := NewBatcher[key, tj](0, 2, 0, nil)
	t.Cleanup(s.Close)
	for _, j := range []tj{{"a", 0}, {"a", 1}, {"a", 2}, {"b", 0}} {
		s.Submit(j.key, j)
	}
	steps := []struct {
		name string
		want []string // the batch's jobs
		keys []key    // and keys
	}{
		{"first batch fills with a's head jobs", []string{"a@0", "a@1"}, []key{"a"}},
		{"a is held: b comes next", []string{"b@0"}, []key{"b"}},
		{"nothing ready while a and b are held", nil, []key{}},
	}
	var held []*Batch[key, tj]
	for _, st := range steps {
		b := s.TakeBatch()
		held = append(held, b)
		if got := describe(b.Jobs()); !slices.Equal(got, st.want) {
			t.Fatalf("%s: batch %v, want %v", st.name, got, st.want)
		}
		if got := b.Keys(); !slices.Equal(got, st.keys) {
			t.Fatalf("%s: keys %v, want %v", st.name, got, st.keys)
		}
	}
	// a@0 done, a@1 put back: it runs before a@2.
	held[0].Release("a", []tj{{"a", 1}})
	held[0].Release("a", []tj{{"a", 1}}) // twice: nothing
	if got := describe(s.TakeBatch().Jobs()); !slices.Equal(got, []string{"a@1", "a@2"}) {
		t.Fatalf("after put-back: batch %v, want [a@1 a@2]", got)
	}
	held[1].Release("b", nil)
	if q := s.Queued("b"); q != 0 || s.Idle() {
		t.Fatalf("b queued %d, idle %v: want b forgotten and a still held", q, s.Idle())
	}
	if s.MaxBatch() != 2 {
		t.Fatalf("MaxBatch = %d, want 2", s.MaxBatch())
	}
}

// TestTakeBatchTurns: keys take turns between batches: a key released
// with jobs left goes to the back of the ready keys, behind those that
// waited while it was held.
func TestTakeBatchTurns(t *testing.T) {
	s, _ := steppedBatcher(t, 2)
	for _, j := range []tj{{"a", 0}, {"a", 1}, {"a", 2}, {"b", 0}, {"c", 0}} {
		s.Submit(j.key, j)
	}
	var got [][]string
	take := func() *Batch[key, tj] {
		b := s.TakeBatch()
		got = append(got, describe(b.Jobs()))
		return b
	}
	first := take() // a@0 a@1
	first.Release("a", nil)
	second := take() // b and c waited: they come before a@2
	for _, k := range second.Keys() {
		second.Release(k, nil)
	}
	take()
	want := [][]string{{"a@0", "a@1"}, {"b@0", "c@0"}, {"a@2"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}

// TestBatcherClose: Close drops a batch being gathered (its handler never
// runs) and the jobs queued, and ends the workers.
func TestBatcherClose(t *testing.T) {
	ran := make(chan []tj, 1)
	s := NewBatcher[key](1, 10, time.Hour, func(b *Batch[key, tj]) { ran <- b.Jobs() })
	s.Submit("x", tj{"x", 0})
	for { // until the worker gathers a batch, waiting an hour for more
		s.mu.Lock()
		forming := s.forming
		s.mu.Unlock()
		if forming {
			break
		}
		time.Sleep(time.Millisecond)
	}
	s.Submit("y", tj{"y", 0}) // joins the batch being gathered
	s.Close()
	select {
	case b := <-ran:
		t.Fatalf("a batch ran after Close: %v", describe(b))
	default:
	}
}
