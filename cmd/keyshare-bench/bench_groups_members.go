package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/bench/worksleep"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
)

// membersResult is a row of the member processes' table (largeGroups):
// the time until the partitions are owned, the commit delay, a leave's
// and a kill's times, the leader's CPU and etcd's load idle and under
// records, and the group's keys and etcd's size.
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

// membersRun runs m keyshare-bench member processes over p partitions of
// the bundled broker and measures a membersResult.
func (c *benchCommand) membersRun(ctx context.Context, endpoints []string, cli *clientv3.Client, p, m int) (membersResult, error) {
	var res membersResult
	group := fmt.Sprintf("mp-%d-%d-%d", p, m, c.groups.Add(1))
	topics := topicsFor(group, p)
	keys := schema.Group{Prefix: "", Name: group}.Keys()
	bt, err := newBenchTopics(ctx, c.brokers, topics)
	if err != nil {
		return res, err
	}
	defer bt.close()
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	obs, err := observeRanges(octx, cli, keys)
	if err != nil {
		return res, err
	}
	bt.produceEach(4)

	g := &memberGroup{c: c, cli: cli, group: group, topics: topics, keys: keys, bt: bt, obs: obs}
	g.memberArgs(endpoints)
	defer g.killAll()
	start := time.Now()
	for i := range m {
		if err := g.spawn(i); err != nil {
			return res, err
		}
	}
	if _, err := waitUntil(ctx, 5*time.Minute, 250*time.Millisecond, func() bool {
		snap := g.snapshot(ctx)
		return settledFor(snap, topics, "") && len(snap.Watermarks()) == p
	}); err != nil {
		return res, fmt.Errorf("owned: %w", err)
	}
	res.owned = time.Since(start)

	if g.kc, err = kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": c.brokers, "group.id": group, "log_level": 3}); err != nil {
		return res, err
	}
	defer g.kc.Close()
	g.atEnd = &endChecker{kc: g.kc, ends: bt.ends}
	if _, err := waitUntil(ctx, 5*time.Minute, 50*time.Millisecond, func() bool { return g.handled() >= bt.produced }); err != nil {
		return res, fmt.Errorf("handled %d of %d: %w", g.handled(), bt.produced, err)
	}
	if res.commitDelay, err = waitUntil(ctx, 5*time.Minute, 50*time.Millisecond, g.committedAtEnd); err != nil {
		return res, fmt.Errorf("commit: %w", err)
	}
	li := g.leaderIndex(ctx)
	if li < 0 || li >= len(g.ms) {
		return res, fmt.Errorf("no leader")
	}
	if err := g.measureCPU(ctx, g.ms[li].cmd.Process.Pid, p, &res); err != nil {
		return res, err
	}
	if err := g.measureLeaves(ctx, (li+1)%m, m, &res); err != nil {
		return res, err
	}
	return res, nil
}

// memberGroup is the group of member processes of one membersRun.
type memberGroup struct {
	c      *benchCommand
	cli    *clientv3.Client
	group  string
	topics map[string]int32
	keys   schema.Keys
	bt     *benchTopics
	obs    *rangeObserver
	kc     *kafka.Consumer // reads the group's committed offsets
	atEnd  *endChecker
	ms     []*benchMember // by index; nil once stopped
	topic  string         // the first topic; the others are in extra
	extra  []string       // the members' further flags
}

// memberArgs sets the flags every member starts with.
func (g *memberGroup) memberArgs(endpoints []string) {
	var args []string
	for t := range g.topics {
		args = append(args, "--topic", t)
	}
	g.topic = args[1]
	g.extra = append([]string{"--etcd", strings.Join(endpoints, ","), "--ttl", "2s", "--drain-timeout", "10s"}, args[2:]...)
	if lvl := os.Getenv("KEYSHARE_BENCH_MEMBER_LOG"); lvl != "" {
		// The members' own log (on the bench's stderr), to see where a
		// figure's time goes.
		g.extra = append(g.extra, "--log-level", lvl)
	}
}

// spawn starts member i.
func (g *memberGroup) spawn(i int) error {
	bm, err := g.c.spawnMember(g.topic, g.group, fmt.Sprintf("m%03d", i), g.extra...)
	if err != nil {
		return err
	}
	g.ms = append(g.ms, bm)
	return nil
}

// killAll kills the members still running.
func (g *memberGroup) killAll() {
	for _, bm := range g.ms {
		if bm != nil {
			bm.stop(syscall.SIGKILL)
		}
	}
}

// snapshot reads the group's state; empty when etcd does not answer.
func (g *memberGroup) snapshot(ctx context.Context) *schema.Snapshot {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	snap, err := coord.ReadSnapshot(rctx, g.cli, groupOf(g.keys))
	if err != nil {
		return &schema.Snapshot{}
	}
	return snap
}

// handled is how many records the running members have handled.
func (g *memberGroup) handled() int {
	n := 0
	for _, bm := range g.ms {
		if bm != nil {
			n += int(max(0, bm.metric("keyshare_records_handled_total")))
		}
	}
	return n
}

// committedAtEnd says whether the group's committed offsets reached the
// topics' end offsets.
func (g *memberGroup) committedAtEnd() bool { return g.atEnd.reached() }

// leaderIndex is the index of the leader's member, -1 when unknown.
func (g *memberGroup) leaderIndex(ctx context.Context) int {
	resp, err := g.cli.Get(ctx, g.keys.Election()+"/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		return -1
	}
	id := string(resp.Kvs[0].Value)
	i, _ := strconv.Atoi(strings.TrimPrefix(id, "m"))
	return i
}

// measureCPU measures the leader's (pid) and the broker's CPU idle for
// 3 s, then under 1,000 records/s over all p partitions for 3 s, with
// etcd's transactions and watch bytes per second over the load.
func (g *memberGroup) measureCPU(ctx context.Context, pid, p int, res *membersResult) error {
	c := g.c
	b0, c0, t0 := c.brokerCPUOf(), cpuOf(pid), time.Now()
	worksleep.Sleep(ctx, 3*time.Second)
	res.cpuIdle = float64(cpuOf(pid)-c0) / float64(time.Since(t0))
	res.brokerIdle = float64(c.brokerCPUOf()-b0) / float64(time.Since(t0))

	var evBytes int64
	wctx, wcancel := context.WithCancel(ctx)
	go func() {
		for wr := range g.cli.Watch(wctx, g.keys.Root(), clientv3.WithPrefix()) {
			for _, ev := range wr.Events {
				evBytes += int64(len(ev.Kv.Key) + len(ev.Kv.Value))
			}
		}
	}()
	r0, _, _ := etcdState(ctx, g.cli, g.keys.Root())
	b0, c0, t0 = c.brokerCPUOf(), cpuOf(pid), time.Now()
	per := max(1, 1000/p)
	for time.Since(t0) < 3*time.Second {
		g.bt.produceEach(per)
		worksleep.Sleep(ctx, time.Duration(float64(time.Second)*float64(per*p)/1000)-5*time.Millisecond)
	}
	d := time.Since(t0)
	res.cpuLoad = float64(cpuOf(pid)-c0) / float64(d)
	res.brokerLoad = float64(c.brokerCPUOf()-b0) / float64(d)
	r1, nkeys, db := etcdState(ctx, g.cli, g.keys.Root())
	wcancel()
	res.txns, res.bytes, res.keys, res.db = float64(r1-r0)/d.Seconds(), float64(evBytes)/d.Seconds(), nkeys, db
	if _, err := waitUntil(ctx, 5*time.Minute, 50*time.Millisecond, g.committedAtEnd); err != nil {
		return fmt.Errorf("commit after load: %w", err)
	}
	return nil
}

// measureLeaves times a graceful leave of member victim (not the leader),
// then the SIGKILL of a new member m once it holds ranges.
func (g *memberGroup) measureLeaves(ctx context.Context, victim, m int, res *membersResult) error {
	var err error
	if res.leave, err = g.stopOne(ctx, victim, syscall.SIGTERM); err != nil {
		return fmt.Errorf("leave: %w", err)
	}
	if err := g.spawn(m); err != nil {
		return err
	}
	if _, err := waitUntil(ctx, 5*time.Minute, 250*time.Millisecond, func() bool {
		snap := g.snapshot(ctx)
		return settledFor(snap, g.topics, "") && len(snap.Owned(fmt.Sprintf("m%03d", m))) > 0
	}); err != nil {
		return fmt.Errorf("rejoin: %w", err)
	}
	if res.kill, err = g.stopOne(ctx, m, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill: %w", err)
	}
	return nil
}

// stopOne signals member i and times until the moved ranges make
// progress, that is until the records produced at the signal on the
// partitions the member held are committed and every partition is held by
// active ranges of the remaining members (timeLeave; it also times the
// commit of every partition). The commit alone is not enough: at P = 16
// the leaving member handles those records itself before its revokes
// reach it, and its final ledger state can be committed before any other
// member holds its ranges.
func (g *memberGroup) stopOne(ctx context.Context, i int, sig syscall.Signal) (leaveTimes, error) {
	id := fmt.Sprintf("m%03d", i)
	var moved []assign.TopicPartition
	seen := make(map[assign.TopicPartition]bool)
	for _, r := range g.obs.snapshot().Owned(id) {
		if !seen[r.TP()] {
			seen[r.TP()] = true
			moved = append(moved, r.TP())
		}
	}
	start := time.Now()
	go g.ms[i].stop(sig)
	g.ms[i] = nil
	g.bt.produceEach(1)
	return timeLeave(ctx, start, g.kc, g.bt.ends, moved, func() bool { return settledFor(g.obs.snapshot(), g.topics, id) })
}
