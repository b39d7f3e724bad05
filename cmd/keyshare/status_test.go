package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
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

// TestStatusUnknownGroupAndGoneOwners: through the binary, a group with no
// key in etcd is exit 1 naming it and its prefix; in a group whose range
// owner's registration is gone, that owner shows as "(gone)", its range as
// unowned and the group as Rebalancing, while the live member shows its
// lease time left, last-seen and records/s, in text and in JSON.
func TestStatusUnknownGroupAndGoneOwners(t *testing.T) {
	testutil.RequireKfake(t, "status reads etcd only, no broker; the kfake run covers it")
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	ctx := t.Context()

	out, code := run(t, 30*time.Second, "status", "--etcd", e.Endpoints[0], "--group", "nosuch")
	if code != 1 || !strings.Contains(out, `unknown group "nosuch"`) || !strings.Contains(out, `(prefix "/keyshare")`) || !strings.Contains(out, "check --group, --prefix and --etcd") {
		t.Fatalf("unknown group: exit %d:\n%s", code, out)
	}

	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	rangeRec := func(owner string, lo, hi uint64) string {
		return js(map[string]any{"v": 1, "topic": "t", "partition": 0, "lo": lo, "hi": hi, "owner": owner, "state": "active", "gen": 1, "since": now})
	}
	for _, kv := range []struct {
		key, value string
		lease      bool
	}{
		{"/keyshare/g/members/live", js(map[string]any{"v": 1, "id": "live", "host": "h", "pid": 1, "started": now, "weight": 1}), true},
		{"/keyshare/g/load/live", js(map[string]any{"v": 1, "member": "live", "at": now.Add(-3 * time.Second), "window": 5,
			"ranges": []any{map[string]any{"topic": "t", "partition": 0, "lo": 0, "hi": 1 << 31, "records_per_sec": 12.5, "busy_per_sec": 0.1, "backlog": 0}}}), true},
		{"/keyshare/g/ranges/t/00000/0000000000", rangeRec("live", 0, 1<<31), false},
		{"/keyshare/g/ranges/t/00000/2147483648", rangeRec("dead", 1<<31, 1<<32), false},
	} {
		var opts []clientv3.OpOption
		if kv.lease {
			opts = append(opts, clientv3.WithLease(lease.ID))
		}
		if _, err := cli.Put(ctx, kv.key, kv.value, opts...); err != nil {
			t.Fatal(err)
		}
	}
	conn := []string{"--etcd", e.Endpoints[0], "--group", "g"}
	out, code = run(t, 30*time.Second, append([]string{"status"}, conn...)...)
	if code != 0 {
		t.Fatalf("status: exit %d:\n%s", code, out)
	}
	for _, want := range []string{"state Rebalancing (1 range under an owner that is gone)", "dead (gone)", "unowned (was active)", "12.5"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "live (gone)") {
		t.Errorf("the live owner shows as gone:\n%s", out)
	}

	out, code = run(t, 30*time.Second, append([]string{"status", "--json"}, conn...)...)
	if code != 0 {
		t.Fatalf("status --json: exit %d:\n%s", code, out)
	}
	for _, leak := range []string{`"v"`, "CreateRev", "DrainMs"} {
		if strings.Contains(out, leak) {
			t.Errorf("status --json holds %s:\n%s", leak, out)
		}
	}
	var st groupStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json is not JSON: %v", err)
	}
	if st.State != groupRebalancing || len(st.Members) != 1 || len(st.Partitions) != 1 || len(st.Partitions[0].Ranges) != 2 {
		t.Fatalf("status --json = %s", out)
	}
	m := st.Members[0]
	if m.LeaseTTL == nil || *m.LeaseTTL <= 0 || *m.LeaseTTL > 60 || m.LastSeen == nil || m.RecordsPerSec == nil || *m.RecordsPerSec != 12.5 {
		t.Errorf("member = %+v", m)
	}
	if r := st.Partitions[0].Ranges; r[0].OwnerGone || !r[1].OwnerGone {
		t.Errorf("owner_gone of live, dead = %v, %v", r[0].OwnerGone, r[1].OwnerGone)
	}
}

// TestStatusShowsHotKeys: a keyshare member handles a partition where two
// keys, one readable and one holding terminal control and bidi
// characters, carry most records; keyshare status shows both by key in
// its hot keys table, the second escaped, and status --json lists them in
// the range's hot_keys, with no raw control character in either output.
// The keys travel from the member to status through etcd
// (hotkeys/<member-id>).
func TestStatusShowsHotKeys(t *testing.T) {
	testutil.RequireKfake(t, "hot keys measured by a member and read from etcd; the kfake run covers it")
	testutil.ParallelOnKfake(t)
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	const readable, hostile = "acct-42", "evil\x1b[2J\u202e"
	// 600 records of each hot key at 5 ms each, one at a time (their
	// order): each keeps a worker busy for 3 s, many load reports.
	var recs []testutil.Record
	for i := range 600 {
		recs = append(recs, testutil.Record{Key: []byte(readable), Value: []byte("v")}, testutil.Record{Key: []byte(hostile), Value: []byte("v")})
		if i%3 == 0 {
			recs = append(recs, testutil.Record{Key: fmt.Appendf(nil, "cold-%d", i%50), Value: []byte("v")})
		}
	}
	testutil.Produce(t, k.Brokers, "orders", recs)
	member := exec.Command(benchBin, "member", "--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders", "--id", "m1",
		"--ttl", "2s", "--work", "5ms", "--load-report-interval", "200ms")
	var mout bytes.Buffer
	member.Stdout, member.Stderr = &mout, &mout
	if err := member.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = member.Process.Kill(); _ = member.Wait() })

	conn := []string{"--etcd", e.Endpoints[0], "--group", "g"}
	rawControl := func(out string) bool {
		return strings.ContainsFunc(out, func(r rune) bool {
			return (r < ' ' && r != '\n' && r != '\t') || (r >= 0x7f && r < 0xa0) || unicode.Is(unicode.Bidi_Control, r)
		})
	}
	var text, js string
	deadline := time.Now().Add(30 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var code int
		text, code = run(t, 30*time.Second, append([]string{"status"}, conn...)...)
		if code != 0 || !strings.Contains(text, "HOT KEY") {
			continue
		}
		rows := map[string]bool{}
		for line := range strings.Lines(text) {
			if f := strings.Fields(line); len(f) >= 4 && f[1] == "orders/0" && f[3] == "m1" {
				rows[f[0]] = true
			}
		}
		if !rows["acct-42"] || !rows[`"evil\x1b[2J\u202e"`] {
			continue
		}
		js, code = run(t, 30*time.Second, append([]string{"status", "--json"}, conn...)...)
		if code != 0 {
			t.Fatalf("status --json: exit %d: %s", code, js)
		}
		var st groupStatus
		if err := json.Unmarshal([]byte(js), &st); err != nil {
			t.Fatalf("status --json is not JSON: %v\n%s", err, js)
		}
		keys := map[string]hotKeyStatus{}
		for _, p := range st.Partitions {
			for _, r := range p.Ranges {
				for _, h := range r.HotKeys {
					if h.Key != nil {
						keys[*h.Key] = h
					}
				}
			}
		}
		if h, ok := keys["acct-42"]; ok && h.BusyPerSec > 0 && h.Share > 0 {
			if _, ok := keys[`"evil\x1b[2J\u202e"`]; ok {
				break
			}
		}
	}
	t.Logf("status:\n%s\nstatus --json:\n%s", text, js)
	if js == "" || !strings.Contains(js, `"hot_keys"`) {
		t.Fatalf("status never showed both hot keys in text and JSON; member log:\n%s", mout.String())
	}
	if rawControl(text) || rawControl(js) {
		t.Fatal("status output holds a raw control or bidi character")
	}
}
