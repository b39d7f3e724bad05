package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/cmd/internal/loadgen"
	"github.com/keyshare/keyshare/testutil"
)

// TestProduceProgress: the bar redrawn with a carriage return is for a
// terminal only; elsewhere a line per update, and nothing with --quiet.
func TestProduceProgress(t *testing.T) {
	for _, c := range []struct {
		quiet, terminal bool
		want            loadgen.Progress
	}{
		{false, true, loadgen.ProgressBar},
		{false, false, loadgen.ProgressLines},
		{true, true, loadgen.NoProgress},
		{true, false, loadgen.NoProgress},
	} {
		if got := produceProgress(c.quiet, c.terminal); got != c.want {
			t.Errorf("quiet %v, terminal %v: %d, want %d", c.quiet, c.terminal, got, c.want)
		}
	}
}

// TestProduceRunsGoOn: through the binary, with stderr not a terminal:
// progress comes a line at a time with no carriage return; the run prints
// its seed and where a next run's sequences start, and a next run started
// there goes on from it.
func TestProduceRunsGoOn(t *testing.T) {
	testutil.ParallelOnKfake(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	out, code := run(t, time.Minute, "produce", "--brokers", k.Brokers, "--topic", "orders", "--count", "1000", "--keys", "10", "--seed", "5")
	if code != 0 {
		t.Fatalf("produce: exit %d: %s", code, out)
	}
	if strings.Contains(out, "\r") || !strings.Contains(out, "50/1000 records sent (5%)\n") || !strings.Contains(out, "1000/1000 records sent (100%)\n") {
		t.Errorf("progress in a pipe: want a line per update and no carriage return:\n%q", out)
	}
	next := regexp.MustCompile(`produced 1000 records to orders \(--seed 5 .* --first-seq (\d+) `).FindStringSubmatch(out)
	if next == nil {
		t.Fatalf("produce output lacks the seed and the next --first-seq:\n%s", out)
	}
	out, code = run(t, time.Minute, "produce", "--brokers", k.Brokers, "--topic", "orders", "--count", "1000", "--keys", "10", "--seed", "5", "--first-seq", next[1], "--quiet")
	first, _ := strconv.Atoi(next[1])
	again := regexp.MustCompile(`--first-seq (\d+) `).FindStringSubmatch(out)
	if code != 0 || again == nil {
		t.Fatalf("second produce: exit %d: %s", code, out)
	}
	// The same seed draws the same keys: each SEQ moved on by the same.
	if n, _ := strconv.Atoi(again[1]); n != 2*first {
		t.Errorf("the second run from --first-seq %d ends at %d, want %d", first, n, 2*first)
	}
	if out, code := run(t, time.Minute, "produce", "--topic", "orders", "--first-seq", "-1"); code != 2 || !strings.Contains(out, "--first-seq -1 must not be negative") {
		t.Errorf("--first-seq -1: exit %d: %s", code, out)
	}
}
