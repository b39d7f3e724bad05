package main

import (
	"fmt"
	"os"

	"github.com/keyshare/keyshare/cmd/internal/cli"
	"github.com/keyshare/keyshare/cmd/internal/membercmd"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == readerCommand {
		// A child process of the throughput scenario (throughput_reader.go).
		if err := runReader(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "keyshare-bench %s: %v\n", readerCommand, err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == memberCommand {
		// keyshare member with the lab's flags (member.go), its flags from
		// $KEYSHARE_* as keyshare's are.
		cli.Program, cli.EnvPrefix, cli.Help = "keyshare-bench", "KEYSHARE", map[string]cli.CommandHelp{"member": memberHelp}
		cli.Main("keyshare-bench member", membercmd.New(&simulation{}).Run, os.Args[2:])
		return
	}
	cli.Main("keyshare-bench", (&benchCommand{}).Run, os.Args[1:])
}
