package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/testutil"
)

// TestStatusKafkaUnreachable: status with --brokers where no broker
// answers says that Kafka was unreachable and exits 1, instead of showing
// the offsets it could not read as unknown and exiting 0.
func TestStatusKafkaUnreachable(t *testing.T) {
	testutil.RequireKfake(t, "no broker is involved; the kfake run covers it")
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	rec, _ := json.Marshal(map[string]any{"v": 1, "topic": "t", "partition": 0, "lo": 0, "hi": uint64(1) << 32,
		"owner": "m1", "state": "active", "gen": 1, "since": time.Now().UTC()})
	if _, err := cli.Put(t.Context(), "/keyshare/g/ranges/t/00000/0000000000", string(rec)); err != nil {
		t.Fatal(err)
	}
	for _, extra := range [][]string{nil, {"--json"}} {
		args := append([]string{"status", "--etcd", e.Endpoints[0], "--group", "g", "--brokers", "127.0.0.1:1"}, extra...)
		out, code := run(t, time.Minute, args...)
		if code != 1 || !strings.Contains(out, "Kafka brokers 127.0.0.1:1 did not answer") || !strings.Contains(out, "--brokers") {
			t.Errorf("%v: exit %d, want 1 and an error saying Kafka was unreachable:\n%s", args, code, out)
		}
	}
}
