package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/bench/worksleep"
	"github.com/keyshare/keyshare/internal/devcluster"
	"github.com/keyshare/keyshare/schema"
)

// largeGroups measures large groups on a 3-member embedded etcd:
// coordination-only members (coord sessions, no Kafka) up to M = 200, and
// keyshare-bench member processes against the bundled broker (kfake, or Apache
// Kafka with --kafka apache), at P = 16 … 4,096 partitions.
func (c *benchCommand) largeGroups(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "keyshare-bench-groups-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ec, err := devcluster.StartEtcdCluster(devcluster.EtcdClusterOptions{Dir: dir, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer ec.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: ec.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(), MaxCallRecvMsgSize: 256 << 20})
	if err != nil {
		return err
	}
	defer cli.Close()

	ps, coordMs, reals := c.groupSizes()
	// The broker is the bundled cluster's: kfake in this process, or
	// Apache Kafka in its own JVM (--kafka apache).
	broker, where := "kfake", "kfake in the bench process"
	if c.kafka == "apache" {
		broker, where = "Apache Kafka", fmt.Sprintf("Apache Kafka %s (one KRaft node, its own JVM, -Xmx512m)", devcluster.ApacheKafkaVersion)
	}
	c.printf("## Scale: large groups\n\n3-member embedded etcd (devcluster.StartEtcdCluster) in the bench process; %s. P partitions over 1–4 topics.\n\n", where)
	c.membersTable(ctx, ec.Endpoints(), cli, reals, broker)
	c.plainGroupTable(ctx, reals, broker)
	c.coordTable(ctx, ec.Endpoints(), cli, ps, coordMs)
	c.printf("\n")
	return nil
}

// groupSize is a group's partitions and members.
type groupSize struct{ p, m int }

// groupSizes is the partition counts and member counts of the
// coordination-only table, and the sizes of the member-process runs:
// their defaults, smaller with --quick, or as KEYSHARE_BENCH_COORD_P,
// KEYSHARE_BENCH_COORD_M (comma-separated) and KEYSHARE_BENCH_GROUPS
// (P:M,P:M,...) set them.
func (c *benchCommand) groupSizes() (ps, coordMs []int, reals []groupSize) {
	ps = []int{16, 256, 1024, 4096}
	coordMs = []int{2, 16, 200}
	if v := os.Getenv("KEYSHARE_BENCH_COORD_M"); v != "" {
		coordMs = nil
		for _, m := range strings.Split(v, ",") {
			mi, _ := strconv.Atoi(m)
			coordMs = append(coordMs, mi)
		}
	}
	if v := os.Getenv("KEYSHARE_BENCH_COORD_P"); v != "" {
		ps = nil
		for _, p := range strings.Split(v, ",") {
			pi, _ := strconv.Atoi(p)
			ps = append(ps, pi)
		}
	}
	reals = []groupSize{{16, 2}, {256, 2}, {1024, 2}, {4096, 2}, {16, 16}, {256, 16}, {1024, 16}, {4096, 16}}
	if c.quick {
		ps, coordMs, reals = []int{16, 256}, []int{2, 16}, []groupSize{{16, 2}, {256, 2}}
	}
	if v := os.Getenv("KEYSHARE_BENCH_GROUPS"); v != "" {
		// P:M,P:M,... of the member-process runs (the rest as set).
		reals = nil
		for _, pm := range strings.Split(v, ",") {
			p, m, _ := strings.Cut(pm, ":")
			pi, _ := strconv.Atoi(p)
			mi, _ := strconv.Atoi(m)
			reals = append(reals, groupSize{pi, mi})
		}
	}
	return ps, coordMs, reals
}

// membersTable prints the member processes' table, a row per size.
func (c *benchCommand) membersTable(ctx context.Context, endpoints []string, cli *clientv3.Client, reals []groupSize, broker string) {
	c.printf("### Member processes against %s\n\n`keyshare-bench member` processes (session TTL 2 s, 16 workers, no work, commit interval 1 s, flush 500 ms). 4 records per partition before start. *owned*: from spawn until every partition has active ranges with ledger state (fetched and flushed). *commit delay*: from the last record handled (members' counters, polled every 50 ms) until Kafka's committed offset equals the end offset on every partition. *leave* / *SIGKILL*: from the signal to a non-leader (with one new record per partition produced at once) until every partition is held by active ranges of the remaining members and, in *moved*, the partitions the member held are committed at their new end (the moved ranges make progress), in *all*, every partition is. Leader CPU: the leading process's user+system CPU per second, over 3 s idle and over 3 s of 1,000 records/s spread over all partitions. etcd: revisions (write transactions) per second and bytes of events (keys + values, read by a watch) per second under that load.\n\n", broker)
	brokerCols, brokerSep := "", ""
	if c.cl.BrokerPids != nil {
		brokerCols, brokerSep = " broker CPU idle | broker CPU load |", "---|---|"
	}
	c.printf("| P | M | owned | commit delay | leave: moved | leave: all | SIGKILL: moved | SIGKILL: all | leader CPU idle | leader CPU load | etcd txns/s load | etcd bytes/s load | keys | DB bytes |%s\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|%s\n", brokerCols, brokerSep)
	for _, rr := range reals {
		r, err := c.membersRun(ctx, endpoints, cli, rr.p, rr.m)
		if err != nil {
			c.printf("| %d | %d | failed: %v |\n", rr.p, rr.m, err)
			continue
		}
		c.printf("| %d | %d | %s | %s | %s | %s | %s | %s | %.3f | %.3f | %.1f | %.0f | %d | %d |%s\n", rr.p, rr.m, secs(r.owned), secs(r.commitDelay), secs(r.leave.moved), secs(r.leave.all), secs(r.kill.moved), secs(r.kill.all), r.cpuIdle, r.cpuLoad, r.txns, r.bytes, r.keys, r.db, c.brokerCPU(r))
	}
}

// plainGroupTable prints the same leave in a plain consumer group, a row
// per size.
func (c *benchCommand) plainGroupTable(ctx context.Context, reals []groupSize, broker string) {
	c.printf("\n### The same leave in a plain Kafka consumer group\n\nFor comparison: M plain librdkafka consumers in the bench process (cooperative-sticky assignment, auto commit every second, librdkafka's other defaults as keyshare's members) share the same P partitions; one closes, with one new record per partition produced at once. *leave*: until every partition is assigned to a remaining consumer and, in *moved*, the partitions the closing consumer held are committed at their new end, in *all*, every partition is. Kafka's own protocol moves the partitions here, and librdkafka, %s and the machine are the same.\n\n| P | M | leave: moved | leave: all |\n|---|---|---|---|\n", broker)
	for _, rr := range reals {
		t, err := c.plainGroupLeave(ctx, rr.p, rr.m)
		if err != nil {
			c.printf("| %d | %d | failed: %v |\n", rr.p, rr.m, err)
			continue
		}
		c.printf("| %d | %d | %s | %s |\n", rr.p, rr.m, secs(t.moved), secs(t.all))
	}
}

// coordTable prints the coordination-only table, a row per P and M.
func (c *benchCommand) coordTable(ctx context.Context, endpoints []string, cli *clientv3.Client, ps, coordMs []int) {
	c.printf("\n### Coordination only (coord sessions, no Kafka)\n\nM sessions in the bench process (8 etcd clients shared, session TTL 10 s, the default). *settle*: from the first join until every partition is covered by active ranges of live members. *leave* / *crash*: from a member's graceful leave (or its client closing without revoking the lease: the 10 s TTL is in the figure) until the group is settled again without it. etcd writes/s idle: revisions per second over 3 s with nothing changing.\n\n")
	c.printf("| P | M | settle | leave → settled | crash → settled | etcd writes/s idle | keys | DB bytes |\n|---|---|---|---|---|---|---|---|\n")
	for _, p := range ps {
		for _, m := range coordMs {
			r, err := c.coordOnly(ctx, endpoints, cli, p, m)
			if err != nil {
				c.printf("| %d | %d | %s | failed: %v |\n", p, m, secs(r.settle), err)
				continue
			}
			c.printf("| %d | %d | %s | %s | %s | %.1f | %d | %d |\n", p, m, secs(r.settle), secs(r.leave), secs(r.crash), r.idleWrites, r.keys, r.db)
		}
	}
}

func secs(d time.Duration) string {
	if d < 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// topicsFor spreads p partitions over 1 (p ≤ 256), 2 (≤ 1,024) or 4 topics.
func topicsFor(prefix string, p int) map[string]int32 {
	n := 1
	switch {
	case p > 1024:
		n = 4
	case p > 256:
		n = 2
	}
	out := make(map[string]int32)
	for i := range n {
		out[fmt.Sprintf("%s-%d", prefix, i)] = int32(p / n)
	}
	return out
}

// settledFor reports whether every partition of topics is covered by active
// ranges of live, non-leaving members (not in gone).
func settledFor(snap *schema.Snapshot, topics map[string]int32, gone string) bool {
	cover := make(map[assign.TopicPartition]uint64)
	for _, r := range snap.Ranges {
		m, live := snap.Members[r.Record.Owner]
		if r.Record.State != schema.StateActive || !live || m.Leaving || r.Record.Owner == gone {
			return false
		}
		cover[r.TP()] += r.Record.Hi - r.Record.Lo
	}
	n := 0
	for _, c := range topics {
		n += int(c)
	}
	if len(cover) != n {
		return false
	}
	for _, v := range cover {
		if v != 1<<32 {
			return false
		}
	}
	return true
}

func waitUntil(ctx context.Context, d time.Duration, every time.Duration, cond func() bool) (time.Duration, error) {
	start := time.Now()
	for time.Since(start) < d {
		if cond() {
			return time.Since(start), nil
		}
		if err := worksleep.Sleep(ctx, every); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("not reached within %s", d)
}

// etcdState is the revision, keys under root and DB size.
func etcdState(ctx context.Context, cli *clientv3.Client, root string) (rev, nkeys, db int64) {
	if resp, err := cli.Get(ctx, root, clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil {
		rev, nkeys = resp.Header.Revision, resp.Count
	}
	for _, ep := range cli.Endpoints()[:1] {
		if st, err := cli.Status(ctx, ep); err == nil {
			db = st.DbSize
		}
	}
	return rev, nkeys, db
}
