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
	var args []string
	for t := range topics {
		args = append(args, "--topic", t)
	}
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	obs, err := observeRanges(octx, cli, keys)
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
	snapNow := func() *schema.Snapshot {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		snap, err := coord.ReadSnapshot(rctx, cli, groupOf(keys))
		if err != nil {
			return &schema.Snapshot{}
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
		resp, err := cli.Get(ctx, keys.Election()+"/", clientv3.WithFirstCreate()...)
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
		for wr := range cli.Watch(wctx, keys.Root(), clientv3.WithPrefix()) {
			for _, ev := range wr.Events {
				evBytes += int64(len(ev.Kv.Key) + len(ev.Kv.Value))
			}
		}
	}()
	r0, _, _ := etcdState(ctx, cli, keys.Root())
	b0, c0, t0 = c.brokerCPUOf(), cpuOf(pid), time.Now()
	per := max(1, 1000/p)
	for time.Since(t0) < 3*time.Second {
		produceEach(per)
		worksleep.Sleep(ctx, time.Duration(float64(time.Second)*float64(per*p)/1000)-5*time.Millisecond)
	}
	d := time.Since(t0)
	res.cpuLoad = float64(cpuOf(pid)-c0) / float64(d)
	res.brokerLoad = float64(c.brokerCPUOf()-b0) / float64(d)
	r1, nkeys, db := etcdState(ctx, cli, keys.Root())
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
