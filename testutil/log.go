package testutil

import (
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Logger returns an hclog logger that writes to t.Log until the test ends (a
// goroutine that logs later is silently dropped, never a panic). The level is
// taken from KEYSHARE_TEST_LOG, default info.
func Logger(t testing.TB) hclog.Logger {
	t.Helper()
	level := hclog.Info
	if v := os.Getenv("KEYSHARE_TEST_LOG"); v != "" {
		level = hclog.LevelFromString(v)
	}
	w := &testWriter{t: t}
	t.Cleanup(w.close)
	return hclog.New(&hclog.LoggerOptions{
		Name:   t.Name(),
		Level:  level,
		Output: w,
	})
}

type testWriter struct {
	t  testing.TB
	mu sync.Mutex
	// done is set when the test ends; t.Log must not be called after.
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// WaitFor polls cond every 20 ms until it holds, failing the test with what
// it waited for if d passes first.
func WaitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
