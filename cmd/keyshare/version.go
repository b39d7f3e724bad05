package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/keyshare/keyshare/cmd/internal/cli"
	"github.com/keyshare/keyshare/internal/version"
)

// versionCommand prints what the binary was built from: keyshare's
// version, the commit and the Go version (version.Build).
type versionCommand struct{}

func (versionCommand) Run(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(os.Stdout, version.Running())
	return nil
}
