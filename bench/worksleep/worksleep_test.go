package worksleep

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSleepWaitsD: Sleep never returns before d has passed, from many
// goroutines at once (each reusing the timer files others put back).
func TestSleepWaitsD(t *testing.T) {
	var wg sync.WaitGroup
	var early atomic.Int64
	for g := range 50 {
		wg.Go(func() {
			for i := range 20 {
				d := time.Duration((g*20+i)%2000) * time.Microsecond
				start := time.Now()
				if err := Sleep(t.Context(), d); err != nil {
					t.Errorf("Sleep(%v): %v", d, err)
					return
				}
				if got := time.Since(start); got < d {
					early.Add(1)
					t.Errorf("Sleep(%v) returned after %v", d, got)
				}
			}
		})
	}
	wg.Wait()
	if n := early.Load(); n > 0 {
		t.Errorf("%d of 1,000 sleeps returned early", n)
	}
}

// TestSleepEndsWithContext: a sleep ends when its context does, with the
// context's error, and a sleep cut short leaves nothing behind that would
// end the next one early (a timer still armed, a read deadline set).
func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(10*time.Millisecond, cancel)
	start := time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep(1h) with its context cancelled after 10 ms: %v, want context.Canceled", err)
	}
	if got := time.Since(start); got > time.Minute {
		t.Fatalf("Sleep(1h) ended %v after it began, with its context cancelled after 10 ms", got)
	}
	ended, stop := context.WithCancel(t.Context())
	stop()
	if err := Sleep(ended, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep(1h) with a context already ended: %v, want context.Canceled", err)
	}
	for range 10 {
		const d = 5 * time.Millisecond
		start := time.Now()
		if err := Sleep(t.Context(), d); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got < d {
			t.Fatalf("Sleep(%v) after cancelled sleeps returned after %v", d, got)
		}
	}
}

// TestSleepZero: no wait for a d of zero or less, even with a context that
// has ended.
func TestSleepZero(t *testing.T) {
	ended, stop := context.WithCancel(t.Context())
	stop()
	for _, d := range []time.Duration{0, -time.Second} {
		if err := Sleep(ended, d); err != nil {
			t.Errorf("Sleep(%v): %v, want nil", d, err)
		}
	}
}

// BenchmarkOvershoot reports how late a sleep of a duration uniform in
// 0–5 ms (the benchmarks' simulated work) wakes, on average, from 25
// goroutines at once, for Sleep and for time.Sleep; "busy" runs three
// goroutines beside them that compute 50 µs and pause 20 µs in turn, so
// that the process's threads are seldom idle:
//
//	go test -run '^$' -bench Overshoot -benchtime 4000x ./bench/worksleep/
func BenchmarkOvershoot(b *testing.B) {
	for _, busy := range []bool{false, true} {
		for _, bc := range []struct {
			name  string
			sleep func(time.Duration)
		}{
			{"worksleep", func(d time.Duration) { _ = Sleep(context.Background(), d) }},
			{"time.Sleep", time.Sleep},
		} {
			name := bc.name
			if busy {
				name += "/busy"
			}
			b.Run(name, func(b *testing.B) {
				if busy {
					stop := spin(3)
					defer stop()
				}
				b.ReportMetric(overshoot(b.N, bc.sleep).Seconds()*1e6, "overshoot-µs")
			})
		}
	}
}

// overshoot sleeps n durations uniform in 0–5 ms from 25 goroutines and
// returns how late they woke on average.
func overshoot(n int, sleep func(time.Duration)) time.Duration {
	var late, next atomic.Int64
	var wg sync.WaitGroup
	for g := range 25 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for next.Add(1) <= int64(n) {
				d := time.Duration(r.Int64N(int64(5 * time.Millisecond)))
				start := time.Now()
				sleep(d)
				late.Add(int64(time.Since(start) - d))
			}
		})
	}
	wg.Wait()
	return time.Duration(late.Load() / int64(n))
}

// spin starts k goroutines that compute 50 µs and pause 20 µs in turn,
// until the returned func is called.
func spin(k int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range k {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				for start := time.Now(); time.Since(start) < 50*time.Microsecond; {
				}
				time.Sleep(20 * time.Microsecond)
			}
		})
	}
	return func() { close(done); wg.Wait() }
}
