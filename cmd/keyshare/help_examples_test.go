package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHelpExamplesRun runs every example line of every command's help as
// written, with nothing listening at the addresses it names: a command
// line that keyshare accepts goes on to connect (and fails, exit 1, or is
// still trying when the test interrupts it); one it refuses exits 2 before
// any connection. So each example must not exit 2.
//
// Nothing listens because every address is made one: the examples'
// localhost:PORT, and the defaults of --etcd and --brokers, become a
// port of this machine that nothing listens on, and a server the
// examples start (keyshare cluster) listens on free ports of its own.
// Otherwise a cluster example would serve the key examples run beside it
// (or a developer's own etcd at 2379 would), and their answers, not the
// command line, would decide the exit status.
func TestHelpExamplesRun(t *testing.T) {
	closed := closedAddr(t)
	defaults := []string{"KEYSHARE_ETCD=" + closed, "KEYSHARE_BROKERS=" + closed, "KEYSHARE_ETCD_ADDR=127.0.0.1:0", "KEYSHARE_KAFKA_ADDR=127.0.0.1:0"}
	for name, h := range commandHelp {
		for line := range strings.Lines(strings.TrimSpace(h.Example)) {
			env, args := exampleArgs(t, line)
			env = append(slices.Clone(defaults), env...) // the example's own settings win
			for i, a := range args {
				if localAddr.MatchString(a) {
					args[i] = closed
				}
			}
			t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
				t.Parallel()
				out, code := runInterrupted(t, 5*time.Second, env, args)
				if code == 2 {
					t.Errorf("help of %q: example %q exits 2:\n%s", name, strings.TrimSpace(line), out)
				}
			})
		}
	}
}

// localAddr is an address of this machine as the examples write it.
var localAddr = regexp.MustCompile(`^(localhost|127\.0\.0\.1):[0-9]+$`)

// closedAddr is an address of this machine that nothing listens on: a
// free port, let go.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// exampleArgs splits an example line into its environment settings and
// keyshare's arguments: words before "keyshare" of the form NAME=VALUE
// are the environment, a shell redirection (>) ends the arguments, and a
// double-quoted word is one argument. A file a flag names (--X-file) and
// a directory (--X-dir) are replaced by the test's own.
func exampleArgs(t *testing.T, line string) (env, args []string) {
	t.Helper()
	words := regexp.MustCompile(`"[^"]*"|\S+`).FindAllString(line, -1)
	i := slices.IndexFunc(words, func(w string) bool { return strings.HasSuffix(w, "keyshare") })
	if i < 0 {
		t.Fatalf("example %q does not run keyshare", line)
	}
	for _, w := range words[:i] {
		if strings.Contains(w, "=") {
			env = append(env, w)
		}
	}
	for _, w := range words[i+1:] {
		if w == ">" || strings.HasPrefix(w, ")") {
			break
		}
		w = strings.Trim(strings.TrimSuffix(w, ")"), `"`)
		if n := len(args); n > 0 && strings.HasSuffix(args[n-1], "-dir") {
			// A directory the command writes (--data-dir /tmp/ks): the
			// test's own, so parallel runs do not share one.
			w = t.TempDir()
		} else if n > 0 && strings.HasSuffix(args[n-1], "-file") {
			// A secret's file (--deliver-token-file /run/secrets/...):
			// one of the test's own, since the example's is not here.
			w = filepath.Join(t.TempDir(), "secret")
			if err := os.WriteFile(w, []byte("example-token\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		args = append(args, w)
	}
	return env, args
}

// runInterrupted runs the binary with args and env added to a flag-free
// environment; after timeout it sends SIGINT (so a demo or cluster stops
// its children) and reports how it exited.
func runInterrupted(t *testing.T, timeout time.Duration, env, args []string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = time.Minute
	cmd.Env = append(flagFreeEnv(), env...)
	cmd.Dir = t.TempDir()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil && ctx.Err() != nil && cmd.ProcessState != nil && cmd.ProcessState.Success() {
		return out.String(), 0 // interrupted, and it stopped cleanly
	}
	if ee, ok := err.(*exec.ExitError); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return out.String(), 128 + int(ws.Signal())
		}
		return out.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return out.String(), 0
}

// TestUsageListsCommands: the top-level help names every command of the
// command table, and for a command with subcommands, every subcommand on
// its line.
func TestUsageListsCommands(t *testing.T) {
	_, list, ok := strings.Cut(usage, "Commands:\n")
	if !ok {
		t.Fatalf("usage has no Commands: section:\n%s", usage)
	}
	list, _, _ = strings.Cut(list, "\n\n")
	lines := map[string]string{}
	for line := range strings.Lines(list) {
		if f := strings.Fields(line); len(f) > 0 {
			lines[f[0]] = line
		}
	}
	for name := range commands {
		line, ok := lines[name]
		if !ok {
			t.Errorf("usage does not list %s", name)
			continue
		}
		for _, sub := range subcommands[name] {
			if !regexp.MustCompile(`\b` + regexp.QuoteMeta(sub) + `\b`).MatchString(line) {
				t.Errorf("usage's line for %s does not name its subcommand %s: %q", name, sub, line)
			}
		}
	}
	for name := range lines {
		if _, ok := commands[name]; !ok && name != "help" {
			t.Errorf("usage lists %s, which is no command", name)
		}
	}
}
