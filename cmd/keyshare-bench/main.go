package main

import (
	"fmt"
	"os"

	"github.com/keyshare/keyshare/internal/cli"
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
	cli.Main("keyshare-bench", (&benchCommand{}).Run, os.Args[1:])
}
