package main

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/internal/version"
)

// TestEveryCommandHasHelp: each command (and each subcommand of group and
// key) has a description and an example for -h.
func TestEveryCommandHasHelp(t *testing.T) {
	var names []string
	for name := range commands {
		subs, ok := subcommands[name]
		if !ok {
			names = append(names, name)
		}
		for _, sub := range subs { // the command prints its own list of subcommands
			names = append(names, name+" "+sub)
		}
	}
	for _, name := range names {
		if h := commandHelp[name]; h.Description == "" || !strings.Contains(h.Example, "keyshare "+name) {
			t.Errorf("%s: help %+v, want a description and an example running keyshare %s", name, h, name)
		}
	}
}

// TestHelpAndVersion: help COMMAND is COMMAND -h (description, example,
// flags, on stdout, exit 0); --version is version, which names this tree's
// release as a development build.
func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"help", "member"}, {"member", "-h"}, {"help", "group", "pause"}} {
		out, code := run(t, time.Minute, args...)
		if code != 0 || !strings.Contains(out, "Example:\n  keyshare ") || !strings.Contains(out, "Flags:") || !strings.Contains(out, "$KEYSHARE_ETCD") {
			t.Errorf("%v: exit %d, output:\n%s", args, code, out)
		}
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, code := run(t, time.Minute, args...)
		if code != 0 || !strings.HasPrefix(out, "keyshare v"+version.Release+"-dev (") || !strings.Contains(out, "go1.") {
			t.Errorf("%v: exit %d, output:\n%s", args, code, out)
		}
	}
}

// TestBashCompletion: the bash script, sourced in bash, completes
// commands, group's subcommands and a command's flags.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	script, code := run(t, time.Minute, "completion", "bash")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, script)
	}
	cases := []struct {
		words string
		want  string
	}{
		{"keyshare me", "member"},
		{"keyshare group pa", "pause"},
		{"keyshare member --max-in", "--max-in-flight --max-in-flight-bytes"},
		{"keyshare member --auto", "--auto-offset-reset"},
		{"keyshare group reset-offsets --to-e", "--to-earliest"},
		{"keyshare completion f", "fish"},
	}
	for _, tc := range cases {
		cmd := exec.Command(bash, "--norc", "-c", script+`
COMP_WORDS=(`+tc.words+`); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _keyshare; echo "${COMPREPLY[*]}"`)
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != tc.want {
			t.Errorf("%q: %v, completions %q, want %q", tc.words, err, out, tc.want)
		}
	}
}
