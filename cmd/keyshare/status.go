package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/internal/cli"
	"github.com/keyshare/keyshare/internal/clientflags"
	"github.com/keyshare/keyshare/internal/kafkaoffsets"
	"github.com/keyshare/keyshare/internal/keys"
	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/state"
)

type statusCommand struct {
	etcdConn      clientflags.Etcd
	kafkaConn     clientflags.Kafka
	group, prefix string
	asJSON, watch bool
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
	Stuck      []state.StuckRecord `json:"-"`
	Losses     []state.LossRecord  `json:"-"`
	StuckJSON  []stuckStatus       `json:"stuck,omitempty"`
	KeyOps     []keyOpJSON         `json:"key_ops,omitempty"` // operations set on keys (keyshare key skip)
	LossesJSON []lossStatus        `json:"lost_to_retention,omitempty"`
	Problems   []string            `json:"problems,omitempty"`
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
	fs.StringVar(&c.prefix, "prefix", state.DefaultPrefix, "etcd prefix of all groups")
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
	cli, err := c.etcdConn.Connect(ctx, etcdCfg, keys.New(c.prefix, c.group).Root())
	if err != nil {
		return err
	}
	defer cli.Close()
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
	g := state.Group{Prefix: c.prefix, Name: c.group}
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
func readStatus(ctx context.Context, cli *clientv3.Client, kc *kafka.Consumer, g state.Group) (*groupStatus, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	schema := keys.New(g.Prefix, g.Name)
	view, err := coord.ReadGroupView(rctx, cli, g)
	if err != nil {
		return nil, fmt.Errorf("%w; check --etcd", err)
	}
	snap := view.Snapshot
	if len(snap.Members) == 0 && len(snap.Ranges) == 0 && snap.Generation.Generation == 0 && view.Leader == "" && !view.Pause.Paused {
		if err := checkGroupExists(rctx, cli, schema); err != nil {
			return nil, err
		}
	}
	reports, hotNames, loadProblems, err := loadReports(rctx, cli, schema)
	if err != nil {
		return nil, err
	}
	hot := hotKeysOf(reports, hotNames)
	var leases []int64
	for _, m := range snap.Members {
		leases = append(leases, m.Lease)
	}
	ttls := leaseTTLs(rctx, cli, leases)
	byMember, rateOfTP := loadRates(reports)
	lastSeen := map[string]time.Time{}
	for _, r := range reports {
		lastSeen[r.Member] = r.At
	}

	st := &groupStatus{Group: g.Name, Prefix: schema.Prefix(), At: time.Now(), Generation: snap.Generation.Generation, Leader: view.Leader}
	for _, m := range snap.Members {
		ms := memberStatus{ID: m.ID, Host: m.Host, PID: m.PID, Weight: m.Weight, Started: m.Started, Leaving: m.Leaving}
		if t, ok := ttls[m.Lease]; ok {
			ms.LeaseTTL = &t
		}
		if t, ok := lastSeen[m.ID]; ok {
			ms.LastSeen = &t
		}
		if r, ok := byMember[m.ID]; ok {
			ms.RecordsPerSec = &r
		}
		st.Members = append(st.Members, ms)
	}
	slices.SortFunc(st.Members, func(a, b memberStatus) int { return strings.Compare(a.ID, b.ID) })
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
	stuckSince := map[rangeKey]time.Time{}
	for _, s := range snap.Stuck {
		stuckSince[rangeKey{s.Topic, s.Partition, s.Lo}] = s.Since
	}
	marks := snap.Watermarks()
	byTP := snap.Partitions()
	var tps []assign.TopicPartition
	for tp := range byTP {
		tps = append(tps, tp)
	}
	slices.SortFunc(tps, func(a, b assign.TopicPartition) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	var committed, ends map[assign.TopicPartition]int64
	if kc != nil && len(tps) > 0 {
		committed, ends = kafkaOffsetsOf(rctx, kc, tps)
	}
	for _, tp := range tps {
		ps := partitionStatus{Topic: tp.Topic, Partition: tp.Partition}
		if w, ok := marks[tp]; ok {
			ps.Safe = &w
		}
		if r, ok := rateOfTP[tp]; ok {
			ps.RecordsPerSec = &r
		}
		for _, r := range byTP[tp] {
			_, live := snap.Members[r.Record.Owner]
			rs := rangeStatus{Lo: r.Record.Lo, Hi: r.Record.Hi, Owner: r.Record.Owner, OwnerGone: !live, State: r.Record.State, Target: r.Record.Target, Pending: r.Entry.PendingCount()}
			rs.HotKeys = hot[reportedRange{r.Record.Owner, tp.Topic, tp.Partition, r.Record.Lo, r.Record.Hi}]
			if t, ok := stuckSince[rangeKey{tp.Topic, tp.Partition, r.Record.Lo}]; ok {
				rs.WatermarkSince = &t
			}
			ps.Pending += rs.Pending
			if w, ok := r.Entry.Watermark(); ok {
				rs.Watermark = &w
				for _, seg := range r.Entry.Segments {
					if ps.Fetched == nil || seg.Next < *ps.Fetched {
						n := seg.Next
						ps.Fetched = &n
					}
				}
			}
			ps.Ranges = append(ps.Ranges, rs)
		}
		if hi, ok := ends[tp]; ok {
			ps.End = &hi
		}
		if c, ok := committed[tp]; ok && c >= 0 {
			ps.Committed = &c
		}
		if ps.End != nil && kc != nil {
			base := int64(0)
			if ps.Committed != nil {
				base = *ps.Committed
			}
			lag := *ps.End - base
			ps.Lag = &lag
			if parts, ok := splitLag(base, ps.Safe, ps.Fetched, *ps.End); ok {
				ps.LagParts = &parts
			}
		}
		st.Partitions = append(st.Partitions, ps)
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

// Every string status prints was read from etcd, where anyone with the
// group's role can write anything: a 1 MB host, a topic key holding ESC, a
// member id with a bidi override. Text output escapes each (textsafe) and
// cuts it, a name to textsafe.MaxKey bytes and other text (a pause reason,
// a handler's error, a damaged value's problem) to textsafe.MaxText, with
// its true size after the cut.

// esc shows text read from etcd safely on a terminal (textsafe.Escape).
func esc(s string) string { return textsafe.Escape(s) }

// name shows a name read from etcd (member id, host, topic, owner)
// safely on a terminal, cut to textsafe.MaxKey bytes.
func name(s string) string { return textsafe.Cut(s, textsafe.MaxKey) }

// printStatusJSON writes st as JSON with the bounds of the text output:
// the values are kept as they are (the encoder escapes control
// characters, textsafe.JSON the bidi and C1 controls it leaves raw) but
// cut, so a 1 MB host is a few hundred bytes and its size.
// Indented, or one line (NDJSON, under --watch).
func printStatusJSON(out io.Writer, st *groupStatus, indent bool) error {
	var b []byte
	var err error
	if indent {
		b, err = json.MarshalIndent(st.clipped(), "", "  ")
	} else {
		b, err = json.Marshal(st.clipped())
	}
	if err != nil {
		return err
	}
	_, err = out.Write(append(textsafe.JSON(b), '\n'))
	return err
}

// clipped is a copy of st with every name cut to textsafe.MaxKey bytes
// and other text to textsafe.MaxText, not escaped (textsafe.Clip).
func (st *groupStatus) clipped() *groupStatus {
	n := func(s string) string { return textsafe.Clip(s, textsafe.MaxKey) }
	txt := func(s string) string { return textsafe.Clip(s, textsafe.MaxText) }
	c := *st
	c.Group, c.Leader = n(st.Group), n(st.Leader)
	if p := st.Paused; p != nil {
		cp := *p
		cp.By, cp.Reason = n(p.By), txt(p.Reason)
		c.Paused = &cp
	}
	c.Members = make([]memberStatus, len(st.Members))
	for i, m := range st.Members {
		m.ID, m.Host = n(m.ID), n(m.Host)
		c.Members[i] = m
	}
	c.Partitions = make([]partitionStatus, len(st.Partitions))
	for i, p := range st.Partitions {
		p.Topic = n(p.Topic)
		p.Ranges = slices.Clone(p.Ranges)
		for j := range p.Ranges {
			r := &p.Ranges[j]
			r.Owner, r.State, r.Target = n(r.Owner), n(r.State), n(r.Target)
			r.HotKeys = slices.Clone(r.HotKeys)
			for k, h := range r.HotKeys {
				if h.Key != nil {
					key := n(*h.Key)
					r.HotKeys[k].Key = &key
				}
			}
		}
		c.Partitions[i] = p
	}
	c.Stuck, c.Losses = nil, nil
	c.StuckJSON = make([]stuckStatus, len(st.Stuck))
	for i, s := range st.Stuck {
		// Key and error are written cut (textsafe.Bytes, Escape) by
		// the member that reports them: cut again only if larger.
		s.Member, s.Topic, s.Key, s.Error = n(s.Member), n(s.Topic), txt(s.Key), txt(s.Error)
		c.StuckJSON[i] = stuckStatusOf(s)
	}
	c.KeyOps = slices.Clone(st.KeyOps)
	for i, op := range c.KeyOps {
		op.Topic, op.Key, op.By, op.Reason, op.Refused, op.Problem = n(op.Topic), txt(op.Key), txt(op.By), txt(op.Reason), txt(op.Refused), txt(op.Problem)
		c.KeyOps[i] = op
	}
	c.LossesJSON = make([]lossStatus, len(st.Losses))
	for i, l := range st.Losses {
		l.Member, l.Topic = n(l.Member), n(l.Topic)
		c.LossesJSON[i] = lossStatusOf(l)
	}
	if d := st.EtcdDown; d != nil {
		c.EtcdDown = &etcdOutage{Since: d.Since, Error: txt(d.Error)}
	}
	c.Problems = make([]string, len(st.Problems))
	for i, p := range st.Problems {
		c.Problems[i] = txt(p)
	}
	return &c
}

// printHotKeys lists every range's hot keys, a row each, as keys: the
// text the member wrote (printable, cut to 64 bytes), escaped again here
// since anyone with the group's role can write etcd; a hash whose key has
// no name shows as the hash. An empty key shows as "".
func printHotKeys(out io.Writer, st *groupStatus) {
	var tw *tabwriter.Writer
	for _, p := range st.Partitions {
		for _, r := range p.Ranges {
			for _, h := range r.HotKeys {
				if tw == nil {
					fmt.Fprintln(out)
					tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "HOT KEY\tPARTITION\tRANGE\tOWNER\tBUSY/S\tSHARE OF RANGE")
				}
				key := fmt.Sprintf("(hash %d)", h.Hash)
				switch {
				case h.Key == nil:
				case *h.Key == "":
					key = `""`
				default:
					key = name(*h.Key)
				}
				fmt.Fprintf(tw, "%s\t%s/%d\t[%d,%d)\t%s\t%.3f\t%5.1f%%\n", key, name(p.Topic), p.Partition, r.Lo, r.Hi, name(r.Owner), h.BusyPerSec, 100*h.Share)
			}
		}
	}
	if tw != nil {
		tw.Flush()
		fmt.Fprintln(out, "(BUSY/S: worker-seconds per second the key's records held a worker, at least; near 1 the key alone keeps a worker busy, and its order lets no other worker help)")
	}
}

// rate shows records per second; "-" when no member reported one.
func rate(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", *r)
}

// lagCell shows the lag and, under --watch, its trend.
func lagCell(p partitionStatus) string {
	if p.LagPerSec == nil {
		return opt(p.Lag)
	}
	return fmt.Sprintf("%s (%+.1f/s)", opt(p.Lag), *p.LagPerSec)
}

func opt(p *int64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

func printStatus(out io.Writer, st *groupStatus) {
	if d := st.EtcdDown; d != nil {
		fmt.Fprintf(out, "ETCD UNREACHABLE since %s (%s): %s\nshowing the status read at %s\n\n",
			d.Since.Format(time.RFC3339), ago(time.Now(), &d.Since), esc(d.Error), st.At.Format(time.RFC3339))
	}
	leader := name(st.Leader)
	if leader == "" {
		leader = "(none)"
	}
	fmt.Fprintf(out, "group %s   state %s (%s)   leader %s   generation %d   members %d   read %s\n",
		name(st.Group), st.State, st.StateReason, leader, st.Generation, len(st.Members), st.At.Format(time.RFC3339))
	if p := st.Paused; p != nil {
		fmt.Fprintf(out, "PAUSED since %s by %s", p.At.Format(time.RFC3339), name(p.By))
		if p.Reason != "" {
			fmt.Fprintf(out, ": %s", esc(p.Reason))
		}
		fmt.Fprintln(out, " (members take no records; keyshare group resume)")
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tHOST\tPID\tWEIGHT\tSTARTED\tLEAVING\tLEASE LEFT\tLAST SEEN\tREC/S")
	for _, m := range st.Members {
		lease := "-"
		if m.LeaseTTL != nil {
			lease = (time.Duration(*m.LeaseTTL) * time.Second).String()
		}
		seen := "-"
		if m.LastSeen != nil {
			seen = ago(st.At, m.LastSeen) + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%v\t%s\t%s\t%s\n", name(m.ID), name(m.Host), m.PID, m.Weight, m.Started.Format(time.RFC3339), m.Leaving, lease, seen, rate(m.RecordsPerSec))
	}
	tw.Flush()
	if len(st.Members) > 0 {
		fmt.Fprintln(out, "(LAST SEEN: the end of the member's latest load report, its own clock; LEASE LEFT: until etcd drops a member that stops renewing)")
	}
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tRANGE\tSHARE\tOWNER\tSTATE\tWATERMARK\tWM AGE\tPENDING\tSAFE\tCOMMITTED\tEND\tREC/S\tLAG")
	for _, p := range st.Partitions {
		for i, r := range p.Ranges {
			owner := name(r.Owner)
			rstate := name(r.State)
			if r.OwnerGone {
				owner += " (gone)"
				rstate = "unowned (was " + rstate + ")"
			}
			if r.Target != "" {
				owner += " → " + name(r.Target)
			}
			share := fmt.Sprintf("%5.1f%%", 100*float64(r.Hi-r.Lo)/float64(ledger.HashSpace))
			age := ago(st.At, r.WatermarkSince)
			if i == 0 {
				fmt.Fprintf(tw, "%s/%d\t[%d,%d)\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", name(p.Topic), p.Partition, r.Lo, r.Hi, share, owner, rstate, opt(r.Watermark), age, r.Pending, opt(p.Safe), opt(p.Committed), opt(p.End), rate(p.RecordsPerSec), lagCell(p))
			} else {
				fmt.Fprintf(tw, "\t[%d,%d)\t%s\t%s\t%s\t%s\t%s\t%d\t\t\t\t\t\n", r.Lo, r.Hi, share, owner, rstate, opt(r.Watermark), age, r.Pending)
			}
		}
	}
	tw.Flush()
	// Explain each lag: its parts sum to it.
	for _, p := range st.Partitions {
		if p.Lag == nil || p.LagParts == nil {
			continue
		}
		fmt.Fprintf(out, "%s/%d %s\n", name(p.Topic), p.Partition, lagLine(*p.Lag, *p.LagParts, p.Pending, p.Safe, st.Paused != nil))
	}
	printHotKeys(out, st)
	for _, s := range st.Stuck {
		// Key and error come from producers and handlers: escaped, so
		// that no control sequence reaches the operator's terminal.
		line := fmt.Sprintf("%s/%d held at %d by key %s, %s (member %s", name(s.Topic), s.Partition, s.Offset, esc(s.Key), time.Since(s.Since).Round(time.Second), name(s.Member))
		if s.Attempts > 0 {
			line += fmt.Sprintf(", %d failed attempts, last: %s", s.Attempts, esc(s.Error))
		}
		fmt.Fprintln(out, line+")")
	}
	for _, op := range st.KeyOps {
		fmt.Fprintln(out, keyOpLine(op))
	}
	for _, l := range st.Losses {
		fmt.Fprintf(out, "%s/%d lost to retention in range [%d,%d): records from offset %d up to the log start %d (%d known pending), found by %s at %s\n",
			name(l.Topic), l.Partition, l.Lo, l.Hi, l.Window(), l.LogStart, l.Known(), name(l.Member), l.At.Format(time.RFC3339))
	}
	for _, p := range st.Problems {
		fmt.Fprintf(out, "problem: %s\n", esc(p))
	}
}
