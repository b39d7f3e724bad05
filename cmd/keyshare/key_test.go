package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/testutil"
)

// TestKeyDescribe: two members share a topic of three partitions and the
// first record of key-3 stalls. key describe, given only the key, names the
// partition the producer wrote it to, a member of the group as its owner,
// its range, every key-3 offset as pending in order and the stuck report;
// --json says the same. Then the bad queries that need the group: an
// unknown group (exit 1), a topic it does not consume, a partition the
// topic does not have (exit 2).
func TestKeyDescribe(t *testing.T) {
	testutil.ParallelOnKfake(t)
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 3})
	recs := testutil.KeyedRecords(150, 10)
	for i := range recs {
		recs[i].Partition = kafka.PartitionAny // librdkafka's default partitioner
	}
	produced := testutil.Produce(t, k.Brokers, "orders", recs)
	var want []int64
	var part int32
	for i, tp := range produced {
		if string(recs[i].Key) == "key-3" {
			want, part = append(want, int64(tp.Offset)), tp.Partition
		}
	}
	slices.Sort(want)
	for _, id := range []string{"m1", "m2"} {
		member := exec.Command(benchBin, "member", "--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders",
			"--id", id, "--stall", "key-3:60s", "--stuck-timeout", "1s", "--drain-timeout", "1s", "--ttl", "2s")
		member.Env = flagFreeEnv()
		var mout bytes.Buffer
		member.Stdout, member.Stderr = &mout, &mout
		if err := member.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = member.Process.Signal(os.Interrupt)
			_ = member.Wait()
			if t.Failed() {
				t.Logf("member %s:\n%s", id, mout.String())
			}
		})
	}

	conn := []string{"key", "describe", "--etcd", e.Endpoints[0], "--brokers", k.Brokers, "--group", "g", "--topic", "orders"}
	var out string
	var code int
	testutil.WaitFor(t, "key-3 reported stuck", 30*time.Second, func() bool {
		out, code = run(t, 30*time.Second, append(conn, "key-3")...)
		return code == 0 && strings.Contains(out, "stuck      at offset")
	})
	t.Log(out)
	for _, line := range []string{
		`key        "key-3"`,
		fmt.Sprintf("partition  orders/%d (computed with consistent_random)", part),
		fmt.Sprintf("stuck      at offset %d since", want[0]),
		fmt.Sprintf("pending    %d: %s\n", len(want), strings.Trim(strings.ReplaceAll(fmt.Sprint(want), " ", ", "), "[]")),
		fmt.Sprintf("watermark  %d (ledger seen up to", want[0]),
		"handled    unknown",
		"(from the watermark to the log end)",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("the description lacks %q", line)
		}
	}
	if !strings.Contains(out, "owner      m1 (live)") && !strings.Contains(out, "owner      m2 (live)") {
		t.Errorf("the description names no live member as the owner")
	}

	out, code = run(t, 30*time.Second, append(append(conn, "--json", "--partition", fmt.Sprint(part)), "key-3")...)
	var j struct {
		Key           string  `json:"key"`
		Partition     int32   `json:"partition"`
		PartitionFrom string  `json:"partition_from"`
		Hash          uint32  `json:"hash"`
		Pending       []int64 `json:"pending"`
		LastHandled   *int64  `json:"last_handled"`
		Range         *struct {
			Owner     string `json:"owner"`
			OwnerLive bool   `json:"owner_live"`
			State     string `json:"state"`
			Watermark *int64 `json:"watermark"`
		} `json:"range"`
		Stuck *struct {
			Offset int64 `json:"offset"`
		} `json:"stuck"`
		Scan struct {
			Complete bool `json:"complete"`
		} `json:"scan"`
	}
	if err := json.Unmarshal([]byte(out), &j); code != 0 || err != nil {
		t.Fatalf("--json: exit %d, %v:\n%s", code, err, out)
	}
	if j.Key != "key-3" || j.Partition != part || j.PartitionFrom != "given" || !slices.Equal(j.Pending, want) || j.LastHandled != nil ||
		j.Range == nil || !j.Range.OwnerLive || j.Range.State != "active" || j.Range.Watermark == nil || *j.Range.Watermark != want[0] ||
		j.Stuck == nil || j.Stuck.Offset != want[0] || !j.Scan.Complete {
		t.Errorf("--json does not describe key-3 (pending %v from %d, partition %d):\n%s", want, want[0], part, out)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"key", "describe", "--etcd", e.Endpoints[0], "--brokers", k.Brokers, "--group", "nope", "--topic", "orders", "key-3"}, 1, `unknown group "nope"`},
		{append(slices.Clone(conn[:len(conn)-1]), "payments", "key-3"), 2, `the group does not consume topic "payments" (its topics: "orders")`},
		{append(slices.Clone(conn), "--partition", "3", "key-3"), 2, `topic "orders" has partitions 0-2, not 3`},
	} {
		out, code := run(t, 30*time.Second, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d (want %d), output:\n%s\nwant it to contain %q", tc.args, code, tc.code, out, tc.want)
		}
	}
}

// TestKeyDescribeBadInput: a bad command line is refused before any
// connection (the etcd and brokers given do not answer), naming the value;
// so are those of the other key subcommands.
func TestKeyDescribeBadInput(t *testing.T) {
	t.Parallel()
	base := []string{"key", "describe", "--etcd", "127.0.0.1:1", "--brokers", "127.0.0.1:1", "--group", "g"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"key"}, "want a subcommand: describe"},
		{[]string{"key", "frobnicate", "k"}, `unknown key subcommand "frobnicate": want describe, skip, park, unpark, replay, cancel or delete-state`},
		{[]string{"key", "skip", "--etcd", "127.0.0.1:1", "--brokers", "127.0.0.1:1", "--group", "g", "--topic", "orders", "k"}, "--offset -1: want the key's head offset"},
		{[]string{"key", "skip", "--etcd", "127.0.0.1:1", "--brokers", "127.0.0.1:1", "--group", "g", "--offset", "3", "--topic", "orders"}, "want the KEY to skip"},
		{[]string{"key", "replay", "--etcd", "127.0.0.1:1", "--brokers", "127.0.0.1:1", "--group", "g", "--topic", "orders", "k"}, "--from -1: want the first offset to run again"},
		{[]string{"key", "park", "--etcd", "127.0.0.1:1", "--brokers", "127.0.0.1:1", "--group", "g", "k"}, "--topic is required"},
		{[]string{"key", "unpark", "--etcd", "127.0.0.1:1", "--brokers", "127.0.0.1:1", "--group", "g", "--topic", "orders", "a", "b"}, `want one KEY, got 2: "a", "b"`},
		{append(slices.Clone(base), "--topic", "orders"), "want the KEY to describe"},
		{append(slices.Clone(base), "--topic", "orders", "a", "b"), `want one KEY, got 2: "a", "b"`},
		{append(slices.Clone(base), "k"), "--topic is required"},
		{append(slices.Clone(base), "--topic", "orders", "--partition", "x", "k"), "--partition"},
		{append(slices.Clone(base), "--topic", "orders", "--partition", "-2", "k"), "want a partition number, 0 or more"},
		{append(slices.Clone(base), "--topic", "orders", "--partitioner", "java", "k"), `--partitioner "java": want consistent_random`},
		{append(slices.Clone(base), "--topic", "orders", "--max-scan", "0", "k"), "--max-scan 0: want 1 or more"},
		{append(slices.Clone(base), "--topic", "orders", ""), "an empty KEY: consistent_random places it in a random partition; give --partition"},
		{[]string{"key", "describe", "--etcd", "127.0.0.1:1", "--brokers", "127.0.0.1:1", "--group", "a/b", "--topic", "orders", "k"}, "--group"},
	} {
		out, code := run(t, 10*time.Second, tc.args...)
		if code != 2 || !strings.Contains(out, tc.want) || strings.Contains(out, "Flags:") {
			t.Errorf("%v: exit %d (want 2), output:\n%s\nwant one error containing %q", tc.args, code, out, tc.want)
		}
	}
	out, code := run(t, 10*time.Second, "help", "key", "describe")
	if code != 0 || !strings.Contains(out, "Usage: keyshare key describe [flags] KEY\n") || !strings.Contains(out, "--partitioner") {
		t.Errorf("help key describe: exit %d:\n%s", code, out)
	}
}
