package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/internal/devcluster"
	"github.com/keyshare/keyshare/internal/keys"
	"github.com/keyshare/keyshare/internal/worksleep"
	"github.com/keyshare/keyshare/state"
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

	ps := []int{16, 256, 1024, 4096}
	coordMs := []int{2, 16, 200}
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
	type realRun struct{ p, m int }
	reals := []realRun{{16, 2}, {256, 2}, {1024, 2}, {4096, 2}, {16, 16}, {256, 16}, {1024, 16}, {4096, 16}}
	if c.quick {
		ps, coordMs, reals = []int{16, 256}, []int{2, 16}, []realRun{{16, 2}, {256, 2}}
	}
	if v := os.Getenv("KEYSHARE_BENCH_GROUPS"); v != "" {
		// P:M,P:M,... of the member-process runs (the rest as set).
		reals = nil
		for _, pm := range strings.Split(v, ",") {
			p, m, _ := strings.Cut(pm, ":")
			pi, _ := strconv.Atoi(p)
			mi, _ := strconv.Atoi(m)
			reals = append(reals, realRun{pi, mi})
		}
	}

	// The broker is the bundled cluster's: kfake in this process, or
	// Apache Kafka in its own JVM (--kafka apache).
	broker, where := "kfake", "kfake in the bench process"
	if c.kafka == "apache" {
		broker, where = "Apache Kafka", fmt.Sprintf("Apache Kafka %s (one KRaft node, its own JVM, -Xmx512m)", devcluster.ApacheKafkaVersion)
	}
	c.printf("## Scale: large groups\n\n3-member embedded etcd (devcluster.StartEtcdCluster) in the bench process; %s. P partitions over 1–4 topics.\n\n", where)
	c.printf("### Member processes against %s\n\n`keyshare-bench member` processes (session TTL 2 s, 16 workers, no work, commit interval 1 s, flush 500 ms). 4 records per partition before start. *owned*: from spawn until every partition has active ranges with ledger state (fetched and flushed). *commit delay*: from the last record handled (members' counters, polled every 50 ms) until Kafka's committed offset equals the end offset on every partition. *leave* / *SIGKILL*: from the signal to a non-leader (with one new record per partition produced at once) until every partition is held by active ranges of the remaining members and, in *moved*, the partitions the member held are committed at their new end (the moved ranges make progress), in *all*, every partition is. Leader CPU: the leading process's user+system CPU per second, over 3 s idle and over 3 s of 1,000 records/s spread over all partitions. etcd: revisions (write transactions) per second and bytes of events (keys + values, read by a watch) per second under that load.\n\n", broker)
	brokerCols, brokerSep := "", ""
	if c.cl.BrokerPids != nil {
		brokerCols, brokerSep = " broker CPU idle | broker CPU load |", "---|---|"
	}
	c.printf("| P | M | owned | commit delay | leave: moved | leave: all | SIGKILL: moved | SIGKILL: all | leader CPU idle | leader CPU load | etcd txns/s load | etcd bytes/s load | keys | DB bytes |%s\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|%s\n", brokerCols, brokerSep)
	for _, rr := range reals {
		r, err := c.membersRun(ctx, ec.Endpoints(), cli, rr.p, rr.m)
		if err != nil {
			c.printf("| %d | %d | failed: %v |\n", rr.p, rr.m, err)
			continue
		}
		c.printf("| %d | %d | %s | %s | %s | %s | %s | %s | %.3f | %.3f | %.1f | %.0f | %d | %d |%s\n", rr.p, rr.m, secs(r.owned), secs(r.commitDelay), secs(r.leave.moved), secs(r.leave.all), secs(r.kill.moved), secs(r.kill.all), r.cpuIdle, r.cpuLoad, r.txns, r.bytes, r.keys, r.db, c.brokerCPU(r))
	}
	c.printf("\n### The same leave in a plain Kafka consumer group\n\nFor comparison: M plain librdkafka consumers in the bench process (cooperative-sticky assignment, auto commit every second, librdkafka's other defaults as keyshare's members) share the same P partitions; one closes, with one new record per partition produced at once. *leave*: until every partition is assigned to a remaining consumer and, in *moved*, the partitions the closing consumer held are committed at their new end, in *all*, every partition is. Kafka's own protocol moves the partitions here, and librdkafka, %s and the machine are the same.\n\n| P | M | leave: moved | leave: all |\n|---|---|---|---|\n", broker)
	for _, rr := range reals {
		t, err := c.plainGroupLeave(ctx, rr.p, rr.m)
		if err != nil {
			c.printf("| %d | %d | failed: %v |\n", rr.p, rr.m, err)
			continue
		}
		c.printf("| %d | %d | %s | %s |\n", rr.p, rr.m, secs(t.moved), secs(t.all))
	}
	c.printf("\n### Coordination only (coord sessions, no Kafka)\n\nM sessions in the bench process (8 etcd clients shared, session TTL 10 s, the default). *settle*: from the first join until every partition is covered by active ranges of live members. *leave* / *crash*: from a member's graceful leave (or its client closing without revoking the lease: the 10 s TTL is in the figure) until the group is settled again without it. etcd writes/s idle: revisions per second over 3 s with nothing changing.\n\n")
	c.printf("| P | M | settle | leave → settled | crash → settled | etcd writes/s idle | keys | DB bytes |\n|---|---|---|---|---|---|---|---|\n")
	for _, p := range ps {
		for _, m := range coordMs {
			r, err := c.coordOnly(ctx, ec.Endpoints(), cli, p, m)
			if err != nil {
				c.printf("| %d | %d | %s | failed: %v |\n", p, m, secs(r.settle), err)
				continue
			}
			c.printf("| %d | %d | %s | %s | %s | %.1f | %d | %d |\n", p, m, secs(r.settle), secs(r.leave), secs(r.crash), r.idleWrites, r.keys, r.db)
		}
	}
	c.printf("\n")
	return nil
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
func settledFor(snap *state.Snapshot, topics map[string]int32, gone string) bool {
	cover := make(map[assign.TopicPartition]uint64)
	for _, r := range snap.Ranges {
		m, live := snap.Members[r.Record.Owner]
		if r.Record.State != state.StateActive || !live || m.Leaving || r.Record.Owner == gone {
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

type coordResult struct {
	settle, leave, crash time.Duration
	idleWrites           float64
	keys, db             int64
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

func (c *benchCommand) coordOnly(ctx context.Context, endpoints []string, cli *clientv3.Client, p, m int) (coordResult, error) {
	var res coordResult
	group := fmt.Sprintf("co-%d-%d-%d", p, m, c.groups.Add(1))
	topics := topicsFor("t", p)
	schema := keys.ForGroup("", group)
	var names []string
	for t := range topics {
		names = append(names, t)
	}
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	obs, err := observeRanges(octx, cli, schema)
	if err != nil {
		return res, err
	}
	clients := make([]*clientv3.Client, 0, 10)
	defer func() {
		for _, k := range clients {
			k.Close()
		}
	}()
	newClient := func() (*clientv3.Client, error) {
		k, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), MaxCallRecvMsgSize: 256 << 20})
		if err == nil {
			clients = append(clients, k)
		}
		return k, err
	}
	shared := make([]*clientv3.Client, 0, 8)
	for range min(8, m) {
		k, err := newClient()
		if err != nil {
			return res, err
		}
		shared = append(shared, k)
	}
	type sess struct {
		s    *coord.Session
		stop context.CancelFunc
		done chan struct{}
	}
	var sessions []*sess
	// lostSessions says how many sessions have ended as lost (a lease
	// deadline passed, or etcd said the lease was gone), for a failure.
	lostSessions := func() string {
		lost := 0
		for _, s := range sessions {
			if errors.Is(context.Cause(s.s.Ctx()), coord.ErrSessionLost) {
				lost++
			}
		}
		return fmt.Sprintf("%d of %d sessions lost", lost, len(sessions))
	}
	defer func() {
		for _, s := range sessions {
			s.stop()
			<-s.done
			_ = s.s.Close()
		}
	}()
	join := func(i int, k *clientv3.Client) (*sess, error) {
		cfg := coord.DefaultConfig()
		cfg.Group, cfg.MemberID, cfg.Topics = group, fmt.Sprintf("m%03d", i), names
		cfg.Partitions = func(context.Context, []string) (map[string]int32, error) { return topics, nil }
		// The default TTL: 200 leases of 2 s on two loaded cores lose
		// sessions to late keepalives.
		cfg.SessionTTL, cfg.DrainTimeout, cfg.RebalanceDebounce = 10*time.Second, 10*time.Second, 100*time.Millisecond
		if lvl := os.Getenv("KEYSHARE_BENCH_COORD_LOG"); lvl != "" {
			// The sessions' own log (on the bench's stderr), to see where
			// a figure's time goes.
			cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: cfg.MemberID, Level: hclog.LevelFromString(lvl), Output: os.Stderr})
		}
		s, err := coord.Join(ctx, k, cfg)
		if err != nil {
			return nil, err
		}
		sctx, stop := context.WithCancel(s.Ctx())
		ss := &sess{s: s, stop: stop, done: make(chan struct{})}
		// A coordination-only member releases what it is asked to give
		// up at once (nothing in flight), with the state it was given.
		go func() {
			defer close(ss.done)
			for {
				select {
				case <-sctx.Done():
					return
				case a := <-s.Updates():
					var rels []coord.RangeRelease
					for _, r := range a.Ranges {
						if r.Record.State == state.StateRevoking {
							rels = append(rels, coord.RangeRelease{Range: r, Final: r.Entry, Written: r.EntryRev > 0})
						}
					}
					if len(rels) > 0 {
						rctx, cancel := context.WithTimeout(sctx, 10*time.Second)
						_ = s.ReleaseRanges(rctx, rels)
						cancel()
					}
				}
			}
		}()
		return ss, nil
	}
	start := time.Now()
	for i := range m {
		k := shared[i%len(shared)]
		if i == m-1 {
			var err error
			if k, err = newClient(); err != nil { // the crash victim's own client
				return res, err
			}
		}
		s, err := join(i, k)
		if err != nil {
			return res, err
		}
		sessions = append(sessions, s)
	}
	res.settle = -1
	settleLimit := 5 * time.Minute
	if m > 64 {
		settleLimit = 2 * time.Minute
	}
	if _, err := waitUntil(ctx, settleLimit, 100*time.Millisecond, func() bool { return settledFor(obs.snapshot(), topics, "") }); err != nil {
		//lint:ignore ST1005 P and M are the benchmark's parameter names
		return res, fmt.Errorf("P=%d M=%d: settle: %w (%s)", p, m, err, lostSessions())
	}
	res.settle = time.Since(start)
	r0, _, _ := etcdState(ctx, cli, schema.Root())
	t0 := time.Now()
	worksleep.Sleep(ctx, 3*time.Second)
	r1, nkeys, db := etcdState(ctx, cli, schema.Root())
	res.idleWrites = float64(r1-r0) / time.Since(t0).Seconds()
	res.keys, res.db = nkeys, db

	// Graceful leave of a non-leader.
	leaver := sessions[1]
	if leaver.s.IsLeader() {
		leaver = sessions[0]
	}
	start = time.Now()
	if err := leaver.s.Leave(ctx); err != nil {
		//lint:ignore ST1005 P and M are the benchmark's parameter names
		return res, fmt.Errorf("P=%d M=%d: leave: %w (%s)", p, m, err, lostSessions())
	}
	if _, err := waitUntil(ctx, 5*time.Minute, 100*time.Millisecond, func() bool { return settledFor(obs.snapshot(), topics, leaver.s.ID()) }); err != nil {
		//lint:ignore ST1005 P and M are the benchmark's parameter names
		return res, fmt.Errorf("P=%d M=%d: leave: %w", p, m, err)
	}
	res.leave = time.Since(start)
	if m < 3 {
		res.crash = -1
		return res, nil
	}
	// Crash: the last member's client goes away without revoking its lease.
	victim := sessions[len(sessions)-1]
	if victim.s.IsLeader() {
		res.crash = -1
		return res, nil
	}
	start = time.Now()
	clients[len(clients)-1].Close()
	if _, err := waitUntil(ctx, 5*time.Minute, 100*time.Millisecond, func() bool { return settledFor(obs.snapshot(), topics, victim.s.ID()) }); err != nil {
		//lint:ignore ST1005 P and M are the benchmark's parameter names
		return res, fmt.Errorf("P=%d M=%d: crash: %w", p, m, err)
	}
	res.crash = time.Since(start)
	return res, nil
}

type membersResult struct {
	owned, commitDelay            time.Duration
	leave, kill                   leaveTimes
	cpuIdle, cpuLoad, txns, bytes float64
	keys, db                      int64
	// brokerIdle and brokerLoad are the broker processes' CPU per second
	// over the same windows as cpuIdle and cpuLoad, where the broker has
	// processes of its own (Apache Kafka; kfake runs in the bench process).
	brokerIdle, brokerLoad float64
}

// brokerCPU is a row's broker CPU cells, empty where the broker runs in
// the bench process.
func (c *benchCommand) brokerCPU(r membersResult) string {
	if c.cl.BrokerPids == nil {
		return ""
	}
	return fmt.Sprintf(" %.3f | %.3f |", r.brokerIdle, r.brokerLoad)
}

// brokerCPUOf is the broker processes' user+system CPU so far; 0 where the
// broker runs in the bench process.
func (c *benchCommand) brokerCPUOf() time.Duration {
	if c.cl.BrokerPids == nil {
		return 0
	}
	var d time.Duration
	for _, pid := range c.cl.BrokerPids() {
		if pid > 0 {
			d += cpuOf(pid)
		}
	}
	return d
}

func (c *benchCommand) membersRun(ctx context.Context, endpoints []string, cli *clientv3.Client, p, m int) (membersResult, error) {
	var res membersResult
	group := fmt.Sprintf("mp-%d-%d-%d", p, m, c.groups.Add(1))
	topics := topicsFor(group, p)
	schema := keys.ForGroup("", group)
	bt, err := newBenchTopics(ctx, c.brokers, topics)
	if err != nil {
		return res, err
	}
	defer bt.close()
	var args []string
	for t := range topics {
		args = append(args, "--topic", t)
	}
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	obs, err := observeRanges(octx, cli, schema)
	if err != nil {
		return res, err
	}
	ends, produceEach := bt.ends, bt.produceEach
	produceEach(4)

	var ms []*benchMember
	defer func() {
		for _, bm := range ms {
			if bm != nil {
				bm.stop(syscall.SIGKILL)
			}
		}
	}()
	extra := append([]string{"--etcd", strings.Join(endpoints, ","), "--ttl", "2s", "--drain-timeout", "10s"}, args[2:]...)
	if lvl := os.Getenv("KEYSHARE_BENCH_MEMBER_LOG"); lvl != "" {
		// The members' own log (on the bench's stderr), to see where a
		// figure's time goes.
		extra = append(extra, "--log-level", lvl)
	}
	spawn := func(i int) (*benchMember, error) {
		return c.spawnMember(args[1], group, fmt.Sprintf("m%03d", i), extra...)
	}
	start := time.Now()
	for i := range m {
		bm, err := spawn(i)
		if err != nil {
			return res, err
		}
		ms = append(ms, bm)
	}
	snapNow := func() *state.Snapshot {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		snap, err := coord.ReadSnapshot(rctx, cli, groupOf(schema))
		if err != nil {
			return &state.Snapshot{}
		}
		return snap
	}
	if _, err := waitUntil(ctx, 5*time.Minute, 250*time.Millisecond, func() bool {
		snap := snapNow()
		return settledFor(snap, topics, "") && len(snap.Watermarks()) == p
	}); err != nil {
		return res, fmt.Errorf("owned: %w", err)
	}
	res.owned = time.Since(start)

	handled := func() int {
		n := 0
		for _, bm := range ms {
			if bm != nil {
				n += int(max(0, bm.metric("keyshare_records_handled_total")))
			}
		}
		return n
	}
	kc, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": c.brokers, "group.id": group, "log_level": 3})
	if err != nil {
		return res, err
	}
	defer kc.Close()
	committedAtEnd := (&endChecker{kc: kc, ends: ends}).reached
	if _, err := waitUntil(ctx, 5*time.Minute, 50*time.Millisecond, func() bool { return handled() >= bt.produced }); err != nil {
		return res, fmt.Errorf("handled %d of %d: %w", handled(), bt.produced, err)
	}
	if res.commitDelay, err = waitUntil(ctx, 5*time.Minute, 50*time.Millisecond, committedAtEnd); err != nil {
		return res, fmt.Errorf("commit: %w", err)
	}

	// The leader's process, and its CPU.
	leaderOf := func() int {
		resp, err := cli.Get(ctx, schema.Election()+"/", clientv3.WithFirstCreate()...)
		if err != nil || len(resp.Kvs) == 0 {
			return -1
		}
		id := string(resp.Kvs[0].Value)
		i, _ := strconv.Atoi(strings.TrimPrefix(id, "m"))
		return i
	}
	li := leaderOf()
	if li < 0 || li >= len(ms) {
		return res, fmt.Errorf("no leader")
	}
	pid := ms[li].cmd.Process.Pid
	b0, c0, t0 := c.brokerCPUOf(), cpuOf(pid), time.Now()
	worksleep.Sleep(ctx, 3*time.Second)
	res.cpuIdle = float64(cpuOf(pid)-c0) / float64(time.Since(t0))
	res.brokerIdle = float64(c.brokerCPUOf()-b0) / float64(time.Since(t0))

	// Load: 1,000 records/s over all partitions for 3 s.
	var evBytes int64
	wctx, wcancel := context.WithCancel(ctx)
	go func() {
		for wr := range cli.Watch(wctx, schema.Root(), clientv3.WithPrefix()) {
			for _, ev := range wr.Events {
				evBytes += int64(len(ev.Kv.Key) + len(ev.Kv.Value))
			}
		}
	}()
	r0, _, _ := etcdState(ctx, cli, schema.Root())
	b0, c0, t0 = c.brokerCPUOf(), cpuOf(pid), time.Now()
	per := max(1, 1000/p)
	for time.Since(t0) < 3*time.Second {
		produceEach(per)
		worksleep.Sleep(ctx, time.Duration(float64(time.Second)*float64(per*p)/1000)-5*time.Millisecond)
	}
	d := time.Since(t0)
	res.cpuLoad = float64(cpuOf(pid)-c0) / float64(d)
	res.brokerLoad = float64(c.brokerCPUOf()-b0) / float64(d)
	r1, nkeys, db := etcdState(ctx, cli, schema.Root())
	wcancel()
	res.txns, res.bytes, res.keys, res.db = float64(r1-r0)/d.Seconds(), float64(evBytes)/d.Seconds(), nkeys, db
	if _, err := waitUntil(ctx, 5*time.Minute, 50*time.Millisecond, committedAtEnd); err != nil {
		return res, fmt.Errorf("commit after load: %w", err)
	}

	// Graceful leave of a non-leader, then a SIGKILL of a new one: the time
	// until the moved ranges make progress, that is until the records
	// produced at the signal on the partitions the member held are
	// committed and every partition is held by active ranges of the
	// remaining members (timeLeave; it also times the commit of every
	// partition). The commit alone is not enough: at P = 16 the leaving
	// member handles those records itself before its revokes reach it,
	// and its final ledger state can be committed before any other member
	// holds its ranges.
	stopOne := func(i int, sig syscall.Signal) (leaveTimes, error) {
		id := fmt.Sprintf("m%03d", i)
		var moved []assign.TopicPartition
		seen := make(map[assign.TopicPartition]bool)
		for _, r := range obs.snapshot().Owned(id) {
			if !seen[r.TP()] {
				seen[r.TP()] = true
				moved = append(moved, r.TP())
			}
		}
		start := time.Now()
		go ms[i].stop(sig)
		ms[i] = nil
		produceEach(1)
		return timeLeave(ctx, start, kc, ends, moved, func() bool { return settledFor(obs.snapshot(), topics, id) })
	}
	victim := (li + 1) % m
	if res.leave, err = stopOne(victim, syscall.SIGTERM); err != nil {
		return res, fmt.Errorf("leave: %w", err)
	}
	bm, err := spawn(m)
	if err != nil {
		return res, err
	}
	ms = append(ms, bm)
	if _, err := waitUntil(ctx, 5*time.Minute, 250*time.Millisecond, func() bool {
		snap := snapNow()
		return settledFor(snap, topics, "") && len(snap.Owned(fmt.Sprintf("m%03d", m))) > 0
	}); err != nil {
		return res, fmt.Errorf("rejoin: %w", err)
	}
	if res.kill, err = stopOne(m, syscall.SIGKILL); err != nil {
		return res, fmt.Errorf("kill: %w", err)
	}
	return res, nil
}
