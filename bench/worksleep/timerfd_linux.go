package worksleep

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// timerFile is a timerfd the runtime's poller waits on. fd is the
// descriptor f wraps, kept apart because f.Fd() would put it in blocking
// mode and take it off the poller.
type timerFile struct {
	f   *os.File
	fd  int
	buf [8]byte // the expiration count a read returns
}

// idle keeps disarmed timer files for the next Sleep: a sleeping worker
// would otherwise create and close a descriptor per record. One the pool
// drops is closed by the os.File's finalizer.
var idle sync.Pool

func newTimerFile() (*timerFile, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return &timerFile{f: os.NewFile(uintptr(fd), "timerfd"), fd: fd}, nil
}

// longAgo is a read deadline already past: it wakes a read at once.
var longAgo = time.Unix(1, 0)

// sleep waits for whichever wakes first of the timerfd and the read's
// deadline, both set to d: the poller sees the timerfd on time while the
// process is idle, the runtime's timers (a deadline is one) are on time
// while it is busy (BenchmarkOvershoot), and neither ends the read before d.
func sleep(ctx context.Context, d time.Duration) error { return sleepArmed(ctx, d, d) }

// sleepArmed is sleep with the timerfd armed for fd rather than d: a test's
// way to make the deadline come first.
func sleepArmed(ctx context.Context, d, fd time.Duration) error {
	t, _ := idle.Get().(*timerFile)
	if t == nil {
		var err error
		if t, err = newTimerFile(); err != nil {
			return timerSleep(ctx, d) // out of descriptors, say: a timer still sleeps
		}
	}
	its := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(fd))}
	if err := unix.TimerfdSettime(t.fd, 0, &its, nil); err != nil {
		_ = t.f.Close()
		return timerSleep(ctx, d)
	}
	end := time.Now().Add(d)
	if err := t.f.SetReadDeadline(end); err != nil {
		_ = t.f.Close()
		return timerSleep(ctx, d)
	}
	stop := context.AfterFunc(ctx, func() { _ = t.f.SetReadDeadline(longAgo) })
	_, err := t.f.Read(t.buf[:])
	if !stop() {
		// ctx ended: its deadline is set, or still being set, which
		// could cut the next sleep on this file short; it is closed.
		_ = t.f.Close()
		if !time.Now().Before(end) {
			return nil // the whole of d had passed
		}
		return ctx.Err()
	}
	switch {
	case err == nil: // the timerfd expired, and its expiry was read
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The deadline came first. The timerfd may still fire; the next
		// sleep's timerfd_settime resets its count of expiries, so that
		// one is never read (TestDeadlineFirstLeavesNoExpiry).
	default:
		_ = t.f.Close()
		return fmt.Errorf("worksleep: wait for a timerfd: %w", err)
	}
	idle.Put(t)
	return nil
}
