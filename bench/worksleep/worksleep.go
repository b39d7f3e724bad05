// Package worksleep is the lab's simulated work: Sleep waits a given time,
// or until a context ends, as closely to that time as the operating system
// allows.
//
// A Go timer (time.Sleep, time.NewTimer) wakes up to a millisecond late on
// Linux when the process is idle: the runtime then waits for its next timer
// in epoll_pwait, whose timeout is whole milliseconds. Measured on the
// benchmarks' VM (BenchmarkOvershoot), time.Sleep of a duration uniform in
// 0–5 ms wakes 0.55–0.56 ms late on average, which on work averaging 2.5 ms
// is a fifth more than the work the benchmarks mean to simulate, and more
// than a JVM's LockSupport.parkNanos (0.2–0.3 ms), which the peers' drivers
// use. On Linux Sleep arms a timerfd and reads it through the runtime's
// poller, which wakes as soon as the descriptor is readable, with a read
// deadline at the same time as a second alarm: 35–44 µs late when idle;
// while the process's threads are busy the poller is looked at less often
// than the timers, and it wakes 0.22–0.37 ms late against time.Sleep's
// 0.16–0.29 ms. The lab's processes sleep far more than they compute. On
// other systems Sleep uses a timer.
//
// keyshare-bench sleeps with it, its simulated work and its own waits
// alike; keyshare's own waits (backoffs, budgets, intervals) need no such
// precision and stay on timers.
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
