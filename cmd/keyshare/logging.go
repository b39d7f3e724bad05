package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// newLogger is the logger of a command that runs until it is stopped (a
// member): hclog on stderr at the given level.
//
// Its stderr may be a pipe whose reader goes first: `keyshare member ... |
// tee log`, then Ctrl-C, and tee is gone before the member has left. Go
// ends a program with SIGPIPE when a write to fd 1 or 2 finds a broken
// pipe, unless the program is notified of SIGPIPE (os/signal), which would
// turn the graceful leave into a crash at its first log line. So the
// logger asks to be notified and never reads the channel: the write fails
// with EPIPE, hclog drops the line, and the leave goes on. A handler, not
// signal.Ignore, because an ignored signal stays ignored in the processes a
// command starts (exec keeps SIG_IGN, and resets handlers).
func newLogger(name, level string) hclog.Logger {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.LevelFromString(level), Output: os.Stderr})
}
