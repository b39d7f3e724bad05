package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/keyshare/keyshare/internal/cli"
)

// versionCommand prints what the binary was built from.
type versionCommand struct{}

func (versionCommand) Run(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return fmt.Errorf("the binary carries no build information")
	}
	fmt.Fprintln(os.Stdout, versionLine(info))
	return nil
}

// versionLine is "keyshare VERSION (commit REV[, modified], go GO)" from
// the build's module version (v1.2.3 for `go install ...@v1.2.3`, (devel)
// for a build in a checkout) and the VCS stamp `go build` records in a
// git checkout.
func versionLine(info *debug.BuildInfo) string {
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	commit := "unknown commit"
	if rev != "" {
		commit = "commit " + rev
		if modified == "true" {
			commit += ", modified"
		}
	}
	return fmt.Sprintf("keyshare %s (%s, %s)", version, commit, info.GoVersion)
}
