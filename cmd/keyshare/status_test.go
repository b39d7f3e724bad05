package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/testutil"
)

// TestStatusBoundsHostileValues: values written straight into etcd, as
// etcdctl would, with a 1 MB host, a 1 MB range owner, a topic holding ESC
// in its key and names holding bidi overrides. keyshare status, describe
// and status --json print each name escaped and cut with its true size:
// the output stays small and carries no raw control or bidi character.
func TestStatusBoundsHostileValues(t *testing.T) {
	testutil.RequireKfake(t, "status reads etcd only, no broker; the kfake run covers it")
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	ctx := t.Context()
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	const mb = 1 << 20
	bigHost := strings.Repeat("h", mb)
	bidi := "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f"
	member := func(id, host string) string {
		b, _ := json.Marshal(map[string]any{"v": 1, "id": id, "host": host, "pid": 1, "started": time.Now().UTC(), "weight": 1})
		return string(b)
	}
	rangeRec := func(topic, owner string) string {
		b, _ := json.Marshal(map[string]any{"v": 1, "topic": topic, "partition": 0, "lo": 0, "hi": 1 << 32, "owner": owner,
			"state": "active", "target": "next" + bidi, "gen": 1, "since": time.Now().UTC()})
		return string(b)
	}
	escTopic := "t\x1b[2J\x1b]0;pwned\a\u009b31m"
	for _, kv := range []struct {
		key, value string
		lease      bool
	}{
		{"/keyshare/g/members/big", member("big", bigHost), true},
		{"/keyshare/g/members/bidi" + bidi, member("bidi"+bidi, "host"+bidi+"\x1b[2J"), true},
		{"/keyshare/g/election/1", "leader" + bidi + "\x1b[2J", true},
		{"/keyshare/g/ranges/" + escTopic + "/00000/0000000000", rangeRec(escTopic, "owner"+bidi), false},
		// Damaged: an owner longer than any name, reported as a problem.
		{"/keyshare/g/ranges/huge/00000/0000000000", rangeRec("huge", strings.Repeat("o", mb)), false},
		{"/keyshare/g/commits/" + escTopic + "/00000", "{not json" + bidi, false},
	} {
		var opts []clientv3.OpOption
		if kv.lease {
			opts = append(opts, clientv3.WithLease(lease.ID))
		}
		if _, err := cli.Put(ctx, kv.key, kv.value, opts...); err != nil {
			t.Fatal(err)
		}
	}
	check := func(t *testing.T, out string) {
		t.Helper()
		if len(out) > 64<<10 {
			t.Fatalf("output is %d bytes, want at most 64 KiB; it begins %.300q", len(out), out)
		}
		for i, r := range out {
			if (r < ' ' && r != '\n' && r != '\t') || (r >= 0x7f && r < 0xa0) || unicode.Is(unicode.Bidi_Control, r) {
				t.Fatalf("output holds the raw character %U at byte %d: %q", r, i, out[max(0, i-80):min(len(out), i+80)])
			}
		}
		for _, want := range []string{"(1048576 bytes)", `\x1b[2J`, `\u202e`} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %s:\n%s", want, out)
			}
		}
		// The damaged range's problem names the owner cut, and says what
		// is wrong with it.
		_, line, _ := strings.Cut(out, "ranges/huge/")
		line, _, _ = strings.Cut(line, "\n")
		if len(line) > 1024 || !strings.Contains(line, `... (1048576 bytes) is longer than 249 bytes`) {
			t.Errorf("problem of the 1 MB owner (%d bytes): %.400s", len(line), line)
		}
	}
	conn := []string{"--etcd", e.Endpoints[0], "--group", "g"}
	for _, args := range [][]string{{"status"}, {"group", "describe"}, {"status", "--json"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, code := run(t, 30*time.Second, append(args, conn...)...)
			if code != 0 {
				t.Fatalf("exit %d: %.2000s", code, out)
			}
			check(t, out)
			if args[len(args)-1] != "--json" {
				return
			}
			var st groupStatus
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				t.Fatalf("status --json is not JSON: %v", err)
			}
			hosts := map[string]string{}
			for _, m := range st.Members {
				hosts[m.ID] = m.Host
			}
			if h := hosts["big"]; !strings.HasPrefix(h, "hhhh") || !strings.HasSuffix(h, "... (1048576 bytes)") {
				t.Errorf("big host in JSON = %.80q...", h)
			}
			// JSON escapes the bidi controls; the value itself is kept.
			if h := hosts["bidi"+bidi]; h != "host"+bidi+"\x1b[2J" {
				t.Errorf("bidi host in JSON = %q", h)
			}
			if len(st.Partitions) != 1 || st.Partitions[0].Topic != escTopic {
				t.Errorf("partitions in JSON = %+v", st.Partitions)
			}
		})
	}
}
