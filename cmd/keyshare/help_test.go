package main

import (
	"strings"
	"testing"
	"time"
)

// TestEveryCommandHasHelp: each command (and each group subcommand) has a
// description and an example for -h.
func TestEveryCommandHasHelp(t *testing.T) {
	names := []string{"group describe", "group reset-offsets", "group pause", "group resume", "group delete"}
	for name := range commands {
		if name != "group" { // group prints its own list of subcommands
			names = append(names, name)
		}
	}
	for _, name := range names {
		if h := commandHelp[name]; h.Description == "" || !strings.HasPrefix(h.Example, "keyshare "+name) && !strings.Contains(h.Example, " keyshare "+name) {
			t.Errorf("%s: help %+v, want a description and an example running keyshare %s", name, h, name)
		}
	}
}

// TestHelpAndVersion: help COMMAND is COMMAND -h (description, example,
// flags, on stdout, exit 0); --version is version.
func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"help", "member"}, {"member", "-h"}, {"help", "group", "pause"}} {
		out, code := run(t, time.Minute, args...)
		if code != 0 || !strings.Contains(out, "Example:\n  keyshare ") || !strings.Contains(out, "Flags:") || !strings.Contains(out, "$KEYSHARE_ETCD") {
			t.Errorf("%v: exit %d, output:\n%s", args, code, out)
		}
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, code := run(t, time.Minute, args...)
		if code != 0 || !strings.HasPrefix(out, "keyshare ") || !strings.Contains(out, "go1.") {
			t.Errorf("%v: exit %d, output:\n%s", args, code, out)
		}
	}
}
