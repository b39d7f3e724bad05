package cli

import (
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// LogLevels are the --log-level values hclog knows.
var LogLevels = []string{"trace", "debug", "info", "warn", "error", "off"}

// NewLogger is the logger of a command that runs until it is stopped (a
// member): hclog on stderr at the given level, as text or, with format
// "json", one JSON object per line. An unknown level or format is an error
// naming the flag (hclog would take an unknown level as info).
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
func NewLogger(name, level, format string) (hclog.Logger, error) {
	if !slices.Contains(LogLevels, strings.ToLower(level)) {
		return nil, fmt.Errorf("--log-level %q: want one of %s", level, strings.Join(LogLevels, ", "))
	}
	if format != "text" && format != "json" {
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.LevelFromString(level), Output: os.Stderr, JSONFormat: format == "json"}), nil
}
