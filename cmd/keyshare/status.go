package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/cmd/internal/cli"
	"github.com/keyshare/keyshare/cmd/internal/clientflags"
	"github.com/keyshare/keyshare/consumer/kafkaoffsets"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
)

type statusCommand struct {
	etcdConn      clientflags.Etcd
	kafkaConn     clientflags.Kafka
	group, prefix string
	asJSON, watch bool
	// screen: stdout is a terminal, so --watch redraws in place.
	screen bool
}

// groupStatus is what status prints, and its JSON form (docs/cli.md
// documents the schema: snake_case, no field of etcd's records leaks).
type groupStatus struct {
	Group  string    `json:"group"`
	Prefix string    `json:"prefix"`
	At     time.Time `json:"at"` // when status read it, this machine's clock
	// State is Stable, Rebalancing, Empty or Paused (groupState);
	// StateReason says why.
	State       string            `json:"state"`
	StateReason string            `json:"state_reason"`
	Leader      string            `json:"leader"`
	Generation  int64             `json:"generation"`
	Paused      *pauseStatus      `json:"paused,omitempty"`
	Members     []memberStatus    `json:"members"`
	Partitions  []partitionStatus `json:"partitions"`
	// Stuck and Losses are what members report; their JSON form is
	// StuckJSON and LossesJSON, filled by clipped.
	Stuck      []schema.StuckRecord `json:"-"`
	Losses     []schema.LossRecord  `json:"-"`
	StuckJSON  []stuckStatus        `json:"stuck,omitempty"`
	KeyOps     []keyOpJSON          `json:"key_ops,omitempty"` // operations set on keys (keyshare key skip)
	LossesJSON []lossStatus         `json:"lost_to_retention,omitempty"`
	Problems   []string             `json:"problems,omitempty"`
	// EtcdDown is set under --watch while etcd cannot be read: the rest
	// is the last status read.
	EtcdDown *etcdOutage `json:"etcd_unreachable,omitempty"`
}

type pauseStatus struct {
	By     string    `json:"by"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

type etcdOutage struct {
	Since time.Time `json:"since"`
	Error string    `json:"error"`
}

// memberStatus is a registered member.
type memberStatus struct {
	ID      string    `json:"id"`
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Weight  int       `json:"weight"`
	Started time.Time `json:"started"`
	Leaving bool      `json:"leaving"`
	// LeaseTTL is the seconds its registration's lease has left: a
	// member that stops renewing it is gone when it reaches 0. Null when
	// etcd could not say.
	LeaseTTL *int64 `json:"lease_ttl_seconds"`
	// LastSeen is the end of the interval of its latest load report (its
	// own clock): when it last said what it handled. Null before its
	// first report.
	LastSeen *time.Time `json:"last_seen"`
	// RecordsPerSec is what that report measured, over all its ranges.
	RecordsPerSec *float64 `json:"records_per_sec"`
}

type partitionStatus struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Safe      *int64 `json:"safe_watermark"`       // lowest watermark of its ranges
	Committed *int64 `json:"committed,omitempty"`  // Kafka's committed offset for the group
	End       *int64 `json:"end_offset,omitempty"` // Kafka's high watermark
	Lag       *int64 `json:"lag,omitempty"`        // end − committed
	// LagPerSec is how fast Lag changed since the last read, under
	// --watch only: positive while the group falls behind.
	LagPerSec *float64 `json:"lag_change_per_sec,omitempty"`
	// Fetched is the lowest next offset over the ranges: every range has
	// fetched up to it.
	Fetched *int64 `json:"fetched,omitempty"`
	// LagParts splits Lag into parts that sum to it (splitLag).
	LagParts *lagParts `json:"lag_parts,omitempty"`
	// Pending is the records its ranges' ledgers hold as not done (in
	// flight or failing), all behind the safe watermark's part of the lag.
	Pending int `json:"pending"`
	// RecordsPerSec sums the owners' load reports for the partition.
	RecordsPerSec *float64      `json:"records_per_sec"`
	Ranges        []rangeStatus `json:"ranges"`
}

type rangeStatus struct {
	Lo    uint64 `json:"lo"`
	Hi    uint64 `json:"hi"`
	Owner string `json:"owner"`
	// OwnerGone: the owner's registration is gone (it left or its lease
	// expired); the range waits for the leader to give it to a member.
	OwnerGone bool   `json:"owner_gone"`
	State     string `json:"state"`
	Target    string `json:"target,omitempty"`
	Watermark *int64 `json:"watermark"`
	// WatermarkSince is when the watermark last moved, as far as status
	// knows: from the owner's stuck report, or under --watch since status
	// first saw this value. Null when unknown.
	WatermarkSince *time.Time `json:"watermark_since"`
	Pending        int        `json:"pending"`
	// HotKeys are the range's busiest keys, from its owner's last load
	// report (hotKeysOf); none before one, or when nothing ran.
	HotKeys []hotKeyStatus `json:"hot_keys,omitempty"`
}

func (c *statusCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	c.etcdConn.Register(fs)
	c.kafkaConn.Register(fs, "", "Kafka bootstrap servers, to show committed and end offsets and lag")
	fs.StringVar(&c.group, "group", "", "group name (required)")
	fs.StringVar(&c.prefix, "prefix", schema.DefaultPrefix, "etcd prefix of all groups")
	fs.BoolVar(&c.asJSON, "json", false, "print JSON")
	fs.BoolVar(&c.watch, "watch", false, "refresh every second until interrupted")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if c.group == "" {
		return cli.Usage(fmt.Errorf("--group is required"))
	}
	return c.show(ctx)
}

// show connects and prints the group's status (also keyshare group describe).
func (c *statusCommand) show(ctx context.Context) error {
	if err := coord.CheckName("--group", c.group); err != nil {
		return cli.Usage(err)
	}
	ks, err := c.kafkaConn.Settings()
	if err != nil {
		return err
	}
	etcdCfg, err := c.etcdConn.Config()
	if err != nil {
		return err
	}
	cli, err := c.etcdConn.Connect(ctx, etcdCfg, schema.Group{Prefix: c.prefix, Name: c.group}.Keys().Root())
	if err != nil {
		return err
	}
	defer cli.Close()
	if ks.Has() {
		// The offsets below are read as best they can be, an unanswered
		// request left unknown; brokers that answer nothing at all are
		// an error of the command line's, said once, not a table of "-".
		if err := clientflags.CheckKafka(ctx, ks); err != nil {
			return err
		}
	}
	// librdkafka's lines go to stderr, except on the watch screen, which
	// shows the latest in place.
	var klog kafkaLog
	if !c.watch || c.asJSON {
		klog.echo = os.Stderr
	}
	kc, err := statusConsumer(ks, c.group, &klog)
	if err != nil {
		return err
	}
	if kc != nil {
		defer kc.Close()
	}
	g := schema.Group{Prefix: c.prefix, Name: c.group}
	c.screen = stdoutIsTerminal()
	if !c.watch {
		st, err := readStatus(ctx, cli, kc, g)
		if err != nil {
			return err
		}
		if c.asJSON {
			return printStatusJSON(os.Stdout, st, true)
		}
		printStatus(os.Stdout, st)
		return nil
	}
	return c.watchStatus(ctx, os.Stdout, time.Second, func() (*groupStatus, error) { return readStatus(ctx, cli, kc, g) }, &klog)
}

// statusConsumer is the Kafka client status reads offsets with (nil when no
// brokers are configured): the user's settings, the group's id.
// Its log lines go to klog, never straight to the terminal.
func statusConsumer(ks *clientflags.KafkaSettings, group string, klog *kafkaLog) (*kafka.Consumer, error) {
	if !ks.Has() {
		return nil, nil
	}
	cm := ks.With(kafka.ConfigMap{"group.id": group, "enable.auto.commit": false})
	if _, ok := cm["log_level"]; !ok {
		cm["log_level"] = 3
	}
	cm["go.logs.channel.enable"] = true
	kc, err := kafka.NewConsumer(&cm)
	if err != nil {
		//lint:ignore ST1005 Kafka is a proper noun
		return nil, ks.Explain(fmt.Errorf("Kafka client: %w", err))
	}
	go klog.drain(kc.Logs())
	return kc, nil
}

// readStatus reads the group in one etcd transaction, its members' load
// reports and lease times, and, with a Kafka client, its committed and end
// offsets (kafkaOffsetsOf): the cost grows in round trips with the number
// of members (one lease question each, eight at a time), not partitions.
// A group with no key at all in etcd is errUnknownGroup.
func readStatus(ctx context.Context, cli *clientv3.Client, kc *kafka.Consumer, g schema.Group) (*groupStatus, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	keys := schema.Group{Prefix: g.Prefix, Name: g.Name}.Keys()
	view, err := coord.ReadGroupView(rctx, cli, g)
	if err != nil {
		return nil, fmt.Errorf("%w; check --etcd", err)
	}
	snap := view.Snapshot
	if len(snap.Members) == 0 && len(snap.Ranges) == 0 && snap.Generation.Generation == 0 && view.Leader == "" && !view.Pause.Paused {
		if err := checkGroupExists(rctx, cli, keys); err != nil {
			return nil, err
		}
	}
	reports, hotNames, loadProblems, err := loadReports(rctx, cli, keys)
	if err != nil {
		return nil, err
	}
	var leases []int64
	for _, m := range snap.Members {
		leases = append(leases, m.Lease)
	}
	ttls := leaseTTLs(rctx, cli, leases)
	byMember, rateOfTP := loadRates(reports)

	st := &groupStatus{Group: g.Name, Prefix: keys.Prefix(), At: time.Now(), Generation: snap.Generation.Generation, Leader: view.Leader}
	st.Members = membersStatus(snap, reports, ttls, byMember)
	for _, p := range snap.Problems {
		st.Problems = append(st.Problems, p.Error())
	}
	st.Problems = append(st.Problems, loadProblems...)
	st.Stuck = snap.Stuck
	st.Losses = snap.Losses
	st.KeyOps = keyOpsStatus(view.KeyOps)
	if ps := view.Pause; ps.Paused {
		st.Paused = &pauseStatus{By: ps.Record.By, Reason: ps.Record.Reason, At: ps.Record.At}
		if ps.Err != nil {
			st.Problems = append(st.Problems, ps.Err.Error())
		}
	}
	pr := newPartitionReads(snap, rateOfTP, hotKeysOf(reports, hotNames))
	tps := pr.partitions()
	if kc != nil && len(tps) > 0 {
		pr.withKafka = true
		pr.committed, pr.ends = kafkaOffsetsOf(rctx, kc, tps)
	}
	for _, tp := range tps {
		st.Partitions = append(st.Partitions, pr.status(tp))
	}
	st.State, st.StateReason = groupState(st.Paused != nil, st.Members, st.Partitions)
	return st, nil
}

// rangeKey names a range within the group.
type rangeKey struct {
	topic     string
	partition int32
	lo        uint64
}

// kafkaOffsetsOf reads the group's committed offsets of tps and their end
// offsets, each in requests of kafkaoffsets.Chunk partitions sent at once.
// What cannot be read is left out (status shows it as unknown).
func kafkaOffsetsOf(ctx context.Context, kc *kafka.Consumer, tps []assign.TopicPartition) (committed, ends map[assign.TopicPartition]int64) {
	committed, _, _ = kafkaoffsets.Committed(kc, tps, 5000)
	ends = make(map[assign.TopicPartition]int64, len(tps))
	a, err := kafka.NewAdminClientFromConsumer(kc)
	if err != nil {
		return committed, ends
	}
	defer a.Close()
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// The log end, as kafka-consumer-groups shows it, whatever
	// isolation.level says.
	got, _, _ := kafkaoffsets.List(lctx, a, tps, kafka.LatestOffsetSpec, kafka.IsolationLevelReadUncommitted)
	for p, o := range got {
		if o >= 0 {
			ends[p] = o
		}
	}
	return committed, ends
}
