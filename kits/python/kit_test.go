// Package kit_test checks the Python endpoint kit (kits/python) from the
// outside: its unit tests, and real `keyshare member --deliver` processes
// delivering to an endpoint built with it, into a real PostgreSQL.
package kit_test

import (
	"bufio"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyshare/keyshare/testutil"
)

// kitDir is this package's directory: the kit's checkout.
var kitDir, _ = filepath.Abs(".")

// keyshare is built from ./cmd/keyshare once per test binary, or is
// $KEYSHARE_BIN, a keyshare built beforehand (a benchmark's reruns).
var keyshare = testutil.BuildOnFirstUse("../../cmd/keyshare", "keyshare", false)

func keyshareBin(t testing.TB) string { return keyshare.Path(t) }

var venv struct {
	once   sync.Once
	dir    string
	python string
	skip   string // why the venv cannot be made here
	err    error
}

// pipCache keeps pip's downloads between runs, so a rerun installs offline.
func pipCache() string {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "keyshare", "pip")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "keyshare", "pip")
}

// kitPython returns the python of a venv (made once per test binary) in
// which the kit is installed from this checkout with its postgres extra,
// as a user installs it. Without PyPI (and nothing cached), it skips.
func kitPython(t testing.TB) string {
	t.Helper()
	venv.once.Do(func() {
		venv.dir, venv.err = os.MkdirTemp("", "keyshare-pykit-venv-")
		if venv.err != nil {
			return
		}
		if out, err := exec.Command("python3", "-m", "venv", venv.dir).CombinedOutput(); err != nil {
			venv.skip = "python3 -m venv failed (install python3-venv to run the kit's tests): " + err.Error() + "\n" + string(out)
			return
		}
		venv.python = filepath.Join(venv.dir, "bin", "python")
		pip := exec.Command(venv.python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
			"--cache-dir", pipCache(), kitDir+"[postgres]")
		pip.Env = append(os.Environ(), "PIP_NO_INPUT=1")
		if out, err := pip.CombinedOutput(); err != nil {
			if c, derr := net.DialTimeout("tcp", "pypi.org:443", 5*time.Second); derr != nil {
				venv.skip = "PyPI cannot be reached (" + derr.Error() + ") and pip's cache lacks the kit's build and postgres dependencies: " + strings.TrimSpace(string(out))
				return
			} else {
				c.Close()
			}
			venv.err = errors.New("pip install " + kitDir + "[postgres]: " + err.Error() + "\n" + string(out))
		}
	})
	if venv.skip != "" {
		t.Skip(venv.skip)
	}
	if venv.err != nil {
		t.Fatal(venv.err)
	}
	return venv.python
}

func TestMain(m *testing.M) {
	code := testutil.RunTests(m)
	keyshare.Remove()
	if venv.dir != "" {
		os.RemoveAll(venv.dir)
	}
	// setuptools builds in the checkout; leave it as it was.
	os.RemoveAll(filepath.Join(kitDir, "build"))
	os.RemoveAll(filepath.Join(kitDir, "src", "keyshare_endpoint.egg-info"))
	os.Exit(code)
}

// TestPythonUnitTests runs the kit's own unit tests (the standard
// library's unittest, on the checkout's sources) with the machine's
// python3: decoding, results, the version check, the deadline and the
// token, and the server's keep-alive.
func TestPythonUnitTests(t *testing.T) {
	cmd := exec.Command("python3", "-m", "unittest", "discover", "-s", "tests", "-v")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "\nOK") {
		t.Fatalf("python3 -m unittest did not say OK:\n%s", out)
	}
	t.Logf("%s", lastLines(string(out), 3))
}

// TestPythonPostgresPart runs the kit's tests of its PostgreSQL part in a
// venv with the kit installed, against a real PostgreSQL: each record once,
// a re-run skipped, an effect's error keeping nothing, stale fences
// refused, batches, prune.
func TestPythonPostgresPart(t *testing.T) {
	python := kitPython(t)
	pg := testutil.StartPostgres(t)
	cmd := exec.Command(python, "-m", "unittest", "-v", "test_postgres")
	cmd.Dir = filepath.Join(kitDir, "tests")
	cmd.Env = append(os.Environ(), "KEYSHARE_TEST_POSTGRES_URL="+pg.URL)
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "skipped") {
		t.Fatalf("python -m unittest test_postgres: %v\n%s", err, out)
	}
	t.Logf("%s", lastLines(string(out), 3))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// pyProcess is a Python endpoint process listening on a port it printed.
type pyProcess struct {
	cmd  *exec.Cmd
	addr string
}

// startPy runs python with args (a script printing "listening on PORT"
// once it listens) and returns it listening; it is killed when t ends.
func startPy(t testing.TB, python string, args ...string) *pyProcess {
	t.Helper()
	cmd := exec.Command(python, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	port, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		t.Fatalf("%s %v did not start (%v): %q", python, args, err, line)
	}
	return &pyProcess{cmd: cmd, addr: "127.0.0.1:" + port}
}
