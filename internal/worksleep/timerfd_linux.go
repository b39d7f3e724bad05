package worksleep

import (
	"context"
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

func sleep(ctx context.Context, d time.Duration) error {
	t, _ := idle.Get().(*timerFile)
	if t == nil {
		var err error
		if t, err = newTimerFile(); err != nil {
			return timerSleep(ctx, d) // out of descriptors, say: a timer still sleeps
		}
	}
	its := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(t.fd, 0, &its, nil); err != nil {
		_ = t.f.Close()
		return timerSleep(ctx, d)
	}
	stop := context.AfterFunc(ctx, func() { _ = t.f.SetReadDeadline(longAgo) })
	_, err := t.f.Read(t.buf[:])
	if !stop() {
		// ctx ended: the deadline is set, or being set, and the timer may
		// still be armed; this file is not used again.
		_ = t.f.Close()
		if err == nil {
			return nil // the whole of d had passed
		}
		return ctx.Err()
	}
	if err != nil {
		// Not expected: while ctx lives only the timer ends the read.
		_ = t.f.Close()
		return fmt.Errorf("worksleep: wait for a timerfd: %w", err)
	}
	idle.Put(t)
	return nil
}
