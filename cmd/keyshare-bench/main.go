package main

import (
	"os"

	"github.com/keyshare/keyshare/internal/cli"
)

func main() {
	cli.Main("keyshare-bench", (&benchCommand{}).Run, os.Args[1:])
}
