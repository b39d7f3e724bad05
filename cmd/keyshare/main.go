package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// command is one subcommand.
type command interface {
	Run(ctx context.Context, args []string) error
}

var commands = map[string]func() command{
	"cluster": func() command { return &clusterCommand{} },
	"produce": func() command { return &produceCommand{} },
	"member":  func() command { return &memberCommand{} },
	"status":  func() command { return &statusCommand{} },
	"group":   func() command { return &groupCommand{} },
	"demo":    func() command { return &demoCommand{} },
	"bench":   func() command { return &benchCommand{} },
}

const usage = `keyshare shares Kafka partitions among any number of consumers by key-hash range.

Usage: keyshare <command> [flags]

Commands:
  demo      run the bundled cluster, a producer and several members, then verify
  cluster   run embedded etcd and an in-process Kafka-protocol broker
  produce   write keyed records with per-key sequence numbers
  member    run one member against any brokers and etcd
  status    show a group's leader, members, ranges, watermarks and lag
  group     administer a group: describe, reset-offsets, delete
  bench     measure keyshare against a vanilla consumer group (writes docs/benchmarks.md with --write)

Run 'keyshare <command> -h' for a command's flags.
`

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		fmt.Fprint(os.Stderr, usage)
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	mk, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "keyshare: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := mk().Run(ctx, os.Args[2:])
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		// Ctrl-C (or SIGTERM) ended what was under way: nothing failed.
		os.Exit(130)
	default:
		fmt.Fprintf(os.Stderr, "keyshare %s: %v\n", os.Args[1], err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is a problem with the command line (exit status 2).
type usageError struct{ error }

// parse parses args with fs, turning flag errors into usage errors.
func parse(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(os.Stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return fmt.Sprint(*l) }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }
