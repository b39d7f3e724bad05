package schedule

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// key is the tests' scheduler key. Its hash is its length, so that keys
// share hashes all the time and every test runs through the key table's
// chains (keytable.go).
type key string

func (k key) Hash() uint64 { return uint64(len(k)) }

// tj is a test job: its key and its offset (counted per key).
type tj struct {
	key key
	o   int64
}

func (j tj) String() string { return fmt.Sprintf("%s@%d", j.key, j.o) }

// stepped is a scheduler without workers, on a clock the test moves.
func stepped(t *testing.T) (*Scheduler[key, tj], *time.Time) {
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := New[key, tj](0, nil)
	s.SetClock(func() time.Time { return clock })
	t.Cleanup(s.Close)
	return s, &clock
}

// TestStepOrder: taken step by step, each key's jobs come in submission
// order, one at a time per key (a running key is not ready until Done),
// and keys take turns.
func TestStepOrder(t *testing.T) {
	for _, tc := range []struct {
		name   string
		submit []tj
		// steps: "next" takes a job (want names it, "" for none ready),
		// "done K" ends key K's run.
		steps []string
		want  []string
	}{
		{
			name:   "one key runs in order",
			submit: []tj{{"a", 0}, {"a", 1}, {"a", 2}},
			steps:  []string{"next", "done a", "next", "done a", "next", "done a", "next"},
			want:   []string{"a@0", "a@1", "a@2", ""},
		},
		{
			name:   "a running key is not taken again",
			submit: []tj{{"a", 0}, {"a", 1}},
			steps:  []string{"next", "next", "done a", "next"},
			want:   []string{"a@0", "", "a@1"},
		},
		{
			name:   "keys take turns",
			submit: []tj{{"a", 0}, {"a", 1}, {"b", 0}, {"b", 1}},
			steps:  []string{"next", "done a", "next", "done b", "next", "done a", "next", "done b"},
			want:   []string{"a@0", "b@0", "a@1", "b@1"},
		},
		{
			name:   "keys run side by side",
			submit: []tj{{"a", 0}, {"b", 0}, {"c", 0}, {"a", 1}},
			steps:  []string{"next", "next", "next", "next", "done a", "next"},
			want:   []string{"a@0", "b@0", "c@0", "", "a@1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := stepped(t)
			for _, j := range tc.submit {
				s.Submit(j.key, j)
			}
			var got []string
			for _, step := range tc.steps {
				if k, ok := cutPrefix(step, "done "); ok {
					s.Done(key(k))
					continue
				}
				k, j, _, ok := s.Next()
				switch {
				case !ok:
					got = append(got, "")
				case k != j.key:
					t.Fatalf("Next gave key %q with job %v", k, j)
				default:
					got = append(got, j.String())
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("took %q, want %q", got, tc.want)
			}
			if tc.want[len(tc.want)-1] == "" && !s.Idle() {
				t.Fatalf("not idle after every job ran")
			}
		})
	}
}

func cutPrefix(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):], true
	}
	return "", false
}

// TestSchedulerOrder: jobs of one key run one at a time in submission
// order; a key whose job blocks holds only itself.
func TestSchedulerOrder(t *testing.T) {
	var mu sync.Mutex
	running := map[key]bool{}
	ran := map[key][]int64{}
	block := make(chan struct{})
	done := make(chan struct{}, 1000)
	s := New[key](4, func(j tj, _ time.Time) {
		k := j.key
		mu.Lock()
		if running[k] {
			t.Errorf("key %s: two jobs at once", k)
		}
		running[k] = true
		mu.Unlock()
		if k == "slow" {
			<-block
		}
		mu.Lock()
		running[k] = false
		ran[k] = append(ran[k], j.o)
		mu.Unlock()
		done <- struct{}{}
	})
	defer s.Close()
	const perKey = 50
	keys := []key{"slow", "a", "b", "c", "d", "e"}
	for o := range int64(perKey) {
		for _, k := range keys {
			s.Submit(k, tj{k, o})
		}
	}
	// Every other key finishes while "slow" holds its first job.
	for range (len(keys) - 1) * perKey {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the other keys did not finish while one key was blocked")
		}
	}
	close(block)
	for range perKey {
		<-done
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range keys {
		if len(ran[k]) != perKey || !slices.IsSorted(ran[k]) {
			t.Fatalf("key %s ran %v, want 0..%d in order", k, ran[k], perKey-1)
		}
	}
}

// TestWorkersBound: keys run side by side up to the number of workers,
// never more.
func TestWorkersBound(t *testing.T) {
	for _, tc := range []struct{ workers, keys int }{{1, 3}, {3, 3}, {3, 8}, {4, 2}} {
		t.Run(fmt.Sprintf("%d workers %d keys", tc.workers, tc.keys), func(t *testing.T) {
			started := make(chan key, 2*tc.keys) // room for every job: Close waits for the workers
			release := make(chan struct{})
			s := New[key](tc.workers, func(j tj, _ time.Time) {
				started <- j.key
				<-release
			})
			defer s.Close()
			defer close(release)
			for i := range tc.keys {
				k := key(fmt.Sprint("k", i))
				s.Submit(k, tj{k, 0})
				s.Submit(k, tj{k, 1}) // waits for k@0: no worker takes it
			}
			want := min(tc.workers, tc.keys)
			seen := map[key]bool{}
			for range want {
				select {
				case k := <-started:
					if seen[k] {
						t.Fatalf("key %s runs twice at once", k)
					}
					seen[k] = true
				case <-time.After(10 * time.Second):
					t.Fatalf("%d keys started, want %d", len(seen), want)
				}
			}
			// Every worker is busy (or every key runs): nothing else
			// may start. A short look suffices to catch a wrong start
			// most of the time; it cannot make the test fail wrongly.
			select {
			case k := <-started:
				t.Fatalf("key %s started beyond %d workers", k, tc.workers)
			case <-time.After(20 * time.Millisecond):
			}
		})
	}
}

// TestSchedulerClose: Close lets the running job finish before it returns
// and drops the jobs queued.
func TestSchedulerClose(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	var mu sync.Mutex
	var ran []string
	s := New[key](1, func(j tj, _ time.Time) {
		if j.o == 0 && j.key == "a" {
			close(started)
			<-release
		}
		mu.Lock()
		ran = append(ran, j.String())
		mu.Unlock()
	})
	for _, j := range []tj{{"a", 0}, {"a", 1}, {"b", 0}} {
		s.Submit(j.key, j)
	}
	<-started // a@0 runs; a@1 and b@0 are queued
	closed := make(chan struct{})
	go func() {
		s.Close()
		close(closed)
	}()
	for { // until Close has marked the scheduler closed
		s.mu.Lock()
		c := s.closed
		s.mu.Unlock()
		if c {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	<-closed
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(ran, []string{"a@0"}) {
		t.Fatalf("ran %v, want [a@0]: the running job finishes before Close returns, the queued ones never run", ran)
	}
}

// TestNoLostWake: a worker is woken for every ready key that no other
// worker is on its way to, however the submissions meet workers coming
// back from short jobs. Each round submits none or some short jobs, so
// that workers are returning, then one to as many keys as there are
// workers whose jobs wait until all of them run at once: a key left ready
// with a worker idle would hold the round until its deadline.
func TestNoLostWake(t *testing.T) {
	const workers = 6
	type round struct {
		want, waiting int
		all           chan struct{} // closed when every waiting key runs
	}
	var (
		mu    sync.Mutex
		ran   = map[key][]int64{}
		r     *round
		abort = make(chan struct{}) // lets the workers go when the test fails
	)
	s := New[key](workers, func(j tj, _ time.Time) {
		mu.Lock()
		ran[j.key] = append(ran[j.key], j.o)
		cur := r
		if strings.HasPrefix(string(j.key), "wait") {
			if cur.waiting++; cur.waiting == cur.want {
				close(cur.all)
			}
		}
		mu.Unlock()
		if strings.HasPrefix(string(j.key), "wait") {
			select {
			case <-cur.all:
			case <-abort:
			}
		}
	})
	defer s.Close()
	defer close(abort)
	var next int64
	for n := range 300 {
		cur := &round{want: 1 + n%workers, all: make(chan struct{})}
		mu.Lock()
		r = cur
		mu.Unlock()
		for i := range n % 3 * workers {
			k := key(fmt.Sprint("short", i%4))
			s.Submit(k, tj{k, next})
			next++
		}
		for i := range cur.want {
			k := key(fmt.Sprint("wait", i))
			s.Submit(k, tj{k, int64(n)})
		}
		select {
		case <-cur.all:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the %d waiting keys never ran at once: a ready key was left with an idle worker", n, cur.want)
		}
	}
	for !s.Idle() {
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, os := range ran {
		if !slices.IsSorted(os) {
			t.Fatalf("key %s ran %v out of order", k, os)
		}
	}
}
