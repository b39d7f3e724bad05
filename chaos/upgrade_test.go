package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// previousRelease is the commit of this repository that the rolling
// upgrade row builds as the release before this tree (CHANGELOG.md names
// it). Move it forward when a release is made: the row then proves that
// the new release and the one before it share a group (docs/upgrades.md).
const (
	previousRelease        = "a239c557cbc63cd37cc279410e52ead81b6e7f71"
	previousReleaseVersion = "0.8.0"
)

func init() {
	rows = append(rows, row{
		name: "18 rolling upgrade from the previous release, and back", short: true, graceful: true, previous: true, handoffsOnly: true, moves: true,
		kfakeOnly: "it tests the stored state two releases share; the broker plays no part, and one build of the previous release is enough",
		fault: func(e *env, long bool, _ *rand.Rand) {
			previous := e.binary()
			for _, to := range []string{bin, previous} { // upgrade, then downgrade
				e.setBinary(to)
				for range rounds(long, 1, 2) {
					for _, id := range e.members() {
						e.stop(id, syscall.SIGTERM)
						e.startID(id)
						time.Sleep(500 * time.Millisecond)
					}
				}
			}
		},
		check: checkNoBadValues,
	})
}

// checkNoBadValues fails the row if any member refused a value another
// wrote: the strict decoders log each as a bad value.
func checkNoBadValues(t *testing.T, e *env) {
	logs, err := filepath.Glob(filepath.Join(e.dir, "*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no member logs in %s: %v", e.dir, err)
	}
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "bad value at") {
				t.Errorf("%s refused another release's value: %s", filepath.Base(f), line)
				break
			}
		}
	}
}

// previousBinary builds `keyshare` from previousRelease, once per test
// binary: the commit's tree from git, built with this tree's Go. Its
// `keyshare member` still takes the simulated work, record log and audit
// log flags (--work, --record, --audit) that this tree's members take as
// `keyshare-bench member`, so the harness starts both with the same
// arguments.
var previousBinary = sync.OnceValues(func() (string, error) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("%w: not a git checkout (%v)", errNoPrevious, err)
	}
	repo := strings.TrimSpace(string(top))
	if err := exec.Command("git", "-C", repo, "cat-file", "-e", previousRelease+"^{commit}").Run(); err != nil {
		return "", fmt.Errorf("%w: commit %s is not in %s (a shallow clone? git fetch --unshallow)", errNoPrevious, previousRelease[:12], repo)
	}
	dir, err := os.MkdirTemp("", "keyshare-previous-")
	if err != nil {
		return "", err
	}
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", repo, previousRelease, dir)
	if out, err := archive.CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive %s: %v\n%s", previousRelease[:12], err, out)
	}
	out := filepath.Join(dir, "keyshare")
	build := exec.Command("go", "build", "-o", out, "./cmd/keyshare")
	build.Dir = dir
	if msg, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build keyshare %s (%s): %v\n%s", previousReleaseVersion, previousRelease[:12], err, msg)
	}
	return out, nil
})

var errNoPrevious = fmt.Errorf("the previous release's source is not here")

// usePrevious makes the row's members start on the previous release; it
// skips the row, saying why, where that release cannot be built.
func usePrevious(t *testing.T, e *env) {
	t.Helper()
	start := time.Now()
	b, err := previousBinary()
	if err != nil {
		if strings.Contains(err.Error(), errNoPrevious.Error()) {
			t.Skipf("rolling upgrade: %v", err)
		}
		t.Fatal(err)
	}
	t.Logf("previous release %s (%s) built in %v", previousReleaseVersion, previousRelease[:12], time.Since(start).Round(time.Second))
	e.setBinary(b)
}
