package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// EtcdGoroutines are the process-wide goroutines etcd's client and embedded
// server leave after Close (gRPC balancer, zap sinks, purge and scheduler
// loops); pass them to goleak.VerifyTestMain so that only leaks of our own
// show.
func EtcdGoroutines() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("go.etcd.io/etcd/client/pkg/v3/logutil.(*MergeLogger).outputLoop"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver.(*EtcdServer).purgeFile"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/pkg/v3/schedule.(*fifo).run"),
	}
}

// BuildKeyshare builds the keyshare command from pkgDir (a path relative to
// the calling test's package) into a temporary directory, for tests that run
// it as a process. It is meant for TestMain: build once per test binary. The
// returned cleanup removes the directory.
func BuildKeyshare(pkgDir string, race bool) (bin string, cleanup func(), err error) {
	return BuildCommand(pkgDir, "keyshare", race)
}

// BuildCommand builds the command in pkgDir as name, as BuildKeyshare does:
// keyshare-bench, whose member command the tests that need simulated
// members run.
func BuildCommand(pkgDir, name string, race bool) (bin string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", name+"-bin-")
	if err != nil {
		return "", nil, err
	}
	bin = filepath.Join(dir, name)
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, pkgDir)...).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("go build %s: %w\n%s", pkgDir, err, out)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// Command is a command built on first use, once per test binary, so that a
// test binary whose tests all skip builds nothing. For keyshare,
// $KEYSHARE_BIN, when set, names a binary built beforehand and nothing is
// built (a benchmark's reruns).
type Command struct {
	pkgDir, name string
	race         bool

	once    sync.Once
	bin     string
	cleanup func()
	err     error
}

// BuildOnFirstUse is the command in pkgDir (relative to the calling test's
// package) named name, built with the race detector when race is set; call
// Remove from TestMain once the tests ran.
func BuildOnFirstUse(pkgDir, name string, race bool) *Command {
	return &Command{pkgDir: pkgDir, name: name, race: race}
}

// Path builds the command if it is not built yet, and fails t when the
// build failed.
func (c *Command) Path(t testing.TB) string {
	t.Helper()
	c.once.Do(func() {
		if bin := os.Getenv("KEYSHARE_BIN"); bin != "" && c.name == "keyshare" {
			c.bin = bin
			return
		}
		c.bin, c.cleanup, c.err = BuildCommand(c.pkgDir, c.name, c.race)
	})
	if c.err != nil {
		t.Fatal(c.err)
	}
	return c.bin
}

// Remove deletes the built command, if one was built.
func (c *Command) Remove() {
	if c.cleanup != nil {
		c.cleanup()
	}
}
