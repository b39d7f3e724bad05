package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Main runs a command with args under a context that SIGINT and SIGTERM
// cancel, then exits: 0 when it succeeded or printed its help, 130 when a
// signal ended it, 2 for a usage error and 1 for any other error, which it
// prints after name ("keyshare member: ...").
func Main(name string, run func(ctx context.Context, args []string) error, args []string) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, args)
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		// Ctrl-C (or SIGTERM) ended what was under way: nothing failed.
		os.Exit(130)
	default:
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
