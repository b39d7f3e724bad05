package main

import (
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// TestMemberLeavesWithClosedLogPipe: `keyshare member ... | tee log`, then
// Ctrl-C: tee dies first and the member's stderr is a pipe nobody reads.
// The member still leaves gracefully: it exits 0, its registration is gone
// at once (its lease revoked, not expired: the TTL is 10 s) and the other
// member owns every range. A member started meanwhile with other topics is
// refused, naming both lists.
func TestMemberLeavesWithClosedLogPipe(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 2, "events": 1})
	member := func(id, topic string, stderr io.Writer) *exec.Cmd {
		cmd := exec.Command(bin, "member", "--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", topic,
			"--id", id, "--ttl", "10s", "--drain-timeout", "2s", "--deliver", "http://127.0.0.1:1/")
		cmd.Stderr = stderr
		return cmd
	}

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	a := member("a", "orders", w)
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close() // a holds the only write end
	t.Cleanup(func() { _ = a.Process.Kill(); _ = a.Wait() })
	var alog testutil.Buffer
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(&alog, r)
	}()
	var blog testutil.Buffer
	b := member("b", "orders", &blog)
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Process.Signal(os.Interrupt); _ = b.Wait() })
	testutil.WaitFor(t, "a and b own a partition each", 60*time.Second, func() bool {
		snap, err := coord.ReadSnapshot(t.Context(), cli, schema.Group{Name: "g"})
		return err == nil && len(snap.Owned("a")) == 1 && len(snap.Owned("b")) == 1
	})

	out, code := run(t, time.Minute, "member", "--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "events", "--id", "c", "--deliver", "http://127.0.0.1:1/")
	if code != 1 || !strings.Contains(out, "topics [events] differ from the topics [orders]") {
		t.Errorf("member with other topics: exit %d, want 1 with an error naming both lists:\n%s", code, out)
	}

	r.Close() // the reader of a's log is gone
	<-copied
	if err := a.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := a.Wait(); err != nil {
		t.Fatalf("a did not leave cleanly with its log pipe closed: %v; its log up to the close:\n%s", err, alog.String())
	}
	resp, err := cli.Get(t.Context(), "/keyshare/g/members/a")
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("a's registration is still there after it exited (%v): it did not close its session", err)
	}
	testutil.WaitFor(t, "b owns every range", 30*time.Second, func() bool {
		snap, err := coord.ReadSnapshot(t.Context(), cli, schema.Group{Name: "g"})
		if err != nil || len(snap.Ranges) == 0 {
			return false
		}
		for _, rs := range snap.Ranges {
			if rs.Record.Owner != "b" || rs.Record.State != schema.StateActive {
				return false
			}
		}
		return true
	})
	if t.Failed() {
		t.Logf("b's log:\n%s", blog.String())
	}
}
