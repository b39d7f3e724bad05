package main

import (
	"context"
	"fmt"
	"os"

	"github.com/keyshare/keyshare/internal/cli"
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
	cli.Main("keyshare "+os.Args[1], mk().Run, os.Args[2:])
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return fmt.Sprint(*l) }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }
