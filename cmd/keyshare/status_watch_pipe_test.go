package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/testutil"
)

// TestWatchThroughPipeEndToEnd: keyshare status --watch with stdout a pipe
// (as under tee or in a CI log) prints plain frames after ruler lines and
// no terminal escape, until interrupted.
func TestWatchThroughPipeEndToEnd(t *testing.T) {
	testutil.RequireKfake(t, "status reads etcd only, no broker; the kfake run covers it")
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	rec, _ := json.Marshal(map[string]any{"v": 1, "topic": "t", "partition": 0, "lo": 0, "hi": uint64(1) << 32,
		"owner": "m1", "state": "active", "gen": 1, "since": time.Now().UTC()})
	if _, err := cli.Put(t.Context(), "/keyshare/g/ranges/t/00000/0000000000", string(rec)); err != nil {
		t.Fatal(err)
	}
	// Interrupted after a few refreshes (one a second); SIGINT ends a
	// watch with exit 0.
	out, code := runInterrupted(t, 4*time.Second, nil, []string{"status", "--watch", "--etcd", e.Endpoints[0], "--group", "g"})
	if code != 0 || strings.Contains(out, "\033") || !strings.HasPrefix(out, watchRuler+"\ngroup g ") || !strings.Contains(out, "t/0 ") {
		t.Errorf("status --watch into a pipe: exit %d, want 0, frames after %q and no escape:\n%q", code, watchRuler, out)
	}
}
