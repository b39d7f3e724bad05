// Package worksleep is the lab's simulated work: Sleep waits a given time,
// or until a context ends, as closely to that time as the operating system
// allows.
//
// A Go timer (time.Sleep, time.NewTimer) wakes up to a millisecond late on
// Linux: when no goroutine is runnable the runtime waits for its next
// timer in epoll_pwait, whose timeout is whole milliseconds. Measured on
// the benchmarks' VM, time.Sleep of a duration uniform in 0–5 ms overshoots
// by 0.55–0.6 ms on average (BenchmarkOvershoot), which on work averaging
// 2.5 ms is a fifth more than the work the benchmarks mean to simulate, and
// more than a JVM's LockSupport.parkNanos (0.2–0.3 ms), which the peers'
// drivers use. On Linux Sleep arms a timerfd and waits for it through the
// runtime's poller, which wakes as soon as the descriptor is readable: about
// 40 µs late on an idle machine, and no worse than a timer under load
// (on other systems Sleep uses a timer).
//
// Only simulated work sleeps with it: keyshare's own waits (backoffs,
// budgets, intervals) are not that precise and need not be.
package worksleep

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends: nil after d, ctx.Err() if ctx ended
// first. A d of zero or less returns nil at once.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	return sleep(ctx, d)
}

// timerSleep is Sleep on a Go timer: the fallback where no timerfd can be
// had.
func timerSleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
