package main

import (
	"context"
	"fmt"
	"os"

	"github.com/keyshare/keyshare/cmd/internal/cli"
	"github.com/keyshare/keyshare/cmd/internal/membercmd"
)

// command is one subcommand.
type command interface {
	Run(ctx context.Context, args []string) error
}

var commands = map[string]func() command{
	"cluster":    func() command { return &clusterCommand{} },
	"produce":    func() command { return &produceCommand{} },
	"member":     func() command { return membercmd.New(nil) },
	"status":     func() command { return &statusCommand{} },
	"group":      func() command { return &groupCommand{} },
	"key":        func() command { return &keyCommand{} },
	"demo":       func() command { return &demoCommand{} },
	"version":    func() command { return versionCommand{} },
	"completion": func() command { return completionCommand{} },
}

const usage = `keyshare shares Kafka partitions among any number of consumers by key-hash range.

Usage: keyshare <command> [flags]

Commands:
  demo      run the bundled cluster, a producer and several members, then verify
  cluster   run embedded etcd and an in-process Kafka-protocol broker
  produce   write keyed records with per-key sequence numbers
  member    run one member against any brokers and etcd
  status    show a group's leader, members, ranges, watermarks and lag
  group     administer a group: describe, reset-offsets, pause, resume, delete
  key       act on one key across a group: describe, skip, park, unpark, replay, cancel, delete-state
  version   print the build's version
  completion  bash|zsh|fish: print a shell completion script
  help      help COMMAND: a command's description, example and flags

Run 'keyshare <command> -h' for a command's flags. Every flag may also
come from $KEYSHARE_<FLAG> (--max-in-flight: $KEYSHARE_MAX_IN_FLIGHT);
the command line wins. Exit status: 0 done, 1 failed, 2 bad command line,
130 interrupted.
`

func main() {
	cli.Program, cli.EnvPrefix, cli.Help = "keyshare", "KEYSHARE", commandHelp // help.go
	if len(os.Args) > 2 && os.Args[1] == "help" {
		os.Args = append(append(os.Args[:1:1], os.Args[2:]...), "-h") // help member: member -h
	}
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		os.Args[1] = "version"
	}
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		if len(os.Args) < 2 {
			fmt.Fprint(os.Stderr, usage)
			os.Exit(2)
		}
		fmt.Fprint(os.Stdout, usage)
		return
	}
	mk, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "keyshare: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	cli.Main("keyshare "+os.Args[1], mk().Run, os.Args[2:])
}
