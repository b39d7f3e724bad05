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
	"github.com/keyshare/keyshare/internal/kafkaoffsets"
	"github.com/keyshare/keyshare/internal/keys"
	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/state"
)

type statusCommand struct {
	etcdConn      etcdFlags
	kafkaConn     kafkaFlags
	group, prefix string
	asJSON, watch bool
}

// groupStatus is what status prints (and its JSON form).
type groupStatus struct {
	Group      string              `json:"group"`
	Leader     string              `json:"leader"`
	Generation int64               `json:"generation"`
	Paused     *state.PauseRecord  `json:"paused,omitempty"`
	Members    []state.Member      `json:"members"`
	Partitions []partitionStatus   `json:"partitions"`
	Stuck      []state.StuckRecord `json:"stuck,omitempty"`
	Losses     []state.LossRecord  `json:"lost_to_retention,omitempty"`
	Problems   []string            `json:"problems,omitempty"`
}

type partitionStatus struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Safe      *int64 `json:"safe_watermark"`       // lowest watermark of its ranges
	Committed *int64 `json:"committed,omitempty"`  // Kafka's committed offset for the group
	End       *int64 `json:"end_offset,omitempty"` // Kafka's high watermark
	Lag       *int64 `json:"lag,omitempty"`        // end − committed
	// Fetched is the lowest next offset over the ranges: every range has
	// fetched up to it. Of the lag, Fetched − Safe is fetched but waiting
	// behind unfinished records, End − Fetched is not yet fetched.
	Fetched *int64        `json:"fetched,omitempty"`
	Ranges  []rangeStatus `json:"ranges"`
}

type rangeStatus struct {
	Lo        uint64 `json:"lo"`
	Hi        uint64 `json:"hi"`
	Owner     string `json:"owner"`
	State     string `json:"state"`
	Target    string `json:"target,omitempty"`
	Watermark *int64 `json:"watermark"`
	Pending   int    `json:"pending"`
}

func (c *statusCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	c.etcdConn.register(fs)
	c.kafkaConn.register(fs, "", "Kafka bootstrap servers, to show committed and end offsets and lag")
	fs.StringVar(&c.group, "group", "", "group name (required)")
	fs.StringVar(&c.prefix, "prefix", "/keyshare", "etcd prefix of all groups")
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
	ks, err := c.kafkaConn.settings()
	if err != nil {
		return err
	}
	etcdCfg, err := c.etcdConn.config()
	if err != nil {
		return err
	}
	cli, err := c.etcdConn.connect(ctx, etcdCfg, keys.New(c.prefix, c.group).Root())
	if err != nil {
		return err
	}
	defer cli.Close()
	kc, err := statusConsumer(ks, c.group)
	if err != nil {
		return err
	}
	if kc != nil {
		defer kc.Close()
	}
	for {
		st, err := readStatus(ctx, cli, kc, state.Group{Prefix: c.prefix, Name: c.group})
		if err != nil {
			return err
		}
		if c.watch && !c.asJSON {
			fmt.Print("\033[H\033[2J")
		}
		if c.asJSON {
			if err := printStatusJSON(os.Stdout, st); err != nil {
				return err
			}
		} else {
			printStatus(os.Stdout, st)
		}
		if !c.watch {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// statusConsumer is the Kafka client status reads offsets with (nil when no
// brokers are configured): the user's settings, the group's id.
func statusConsumer(ks *kafkaSettings, group string) (*kafka.Consumer, error) {
	if !ks.has() {
		return nil, nil
	}
	cm := ks.with(kafka.ConfigMap{"group.id": group, "enable.auto.commit": false})
	if _, ok := cm["log_level"]; !ok {
		cm["log_level"] = 3
	}
	kc, err := kafka.NewConsumer(&cm)
	if err != nil {
		//lint:ignore ST1005 Kafka is a proper noun
		return nil, ks.explain(fmt.Errorf("Kafka client: %w", err))
	}
	return kc, nil
}

// readStatus reads the group in one etcd transaction and, with a Kafka
// client, its committed and end offsets (kafkaOffsetsOf): the cost does not
// grow in round trips with the number of partitions.
func readStatus(ctx context.Context, cli *clientv3.Client, kc *kafka.Consumer, g state.Group) (*groupStatus, error) {
	group := g.Name
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	view, err := coord.ReadGroupView(rctx, cli, g)
	if err != nil {
		return nil, fmt.Errorf("%w; check --etcd", err)
	}
	snap := view.Snapshot
	st := &groupStatus{Group: group, Generation: snap.Generation.Generation, Leader: view.Leader}
	for _, m := range snap.Members {
		st.Members = append(st.Members, m)
	}
	slices.SortFunc(st.Members, func(a, b state.Member) int { return strings.Compare(a.ID, b.ID) })
	for _, p := range snap.Problems {
		st.Problems = append(st.Problems, p.Error())
	}
	st.Stuck = snap.Stuck
	st.Losses = snap.Losses
	if ps := view.Pause; ps.Paused {
		st.Paused = &ps.Record
		if ps.Err != nil {
			st.Problems = append(st.Problems, ps.Err.Error())
		}
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
		for _, r := range byTP[tp] {
			rs := rangeStatus{Lo: r.Record.Lo, Hi: r.Record.Hi, Owner: r.Record.Owner, State: r.Record.State, Target: r.Record.Target, Pending: r.Entry.PendingCount()}
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
		}
		st.Partitions = append(st.Partitions, ps)
	}
	return st, nil
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
func printStatusJSON(out io.Writer, st *groupStatus) error {
	b, err := json.MarshalIndent(st.clipped(), "", "  ")
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
	c.Members = make([]state.Member, len(st.Members))
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
		}
		c.Partitions[i] = p
	}
	c.Stuck = make([]state.StuckRecord, len(st.Stuck))
	for i, s := range st.Stuck {
		// Key and error are written cut (textsafe.Bytes, Escape) by
		// the member that reports them: cut again only if larger.
		s.Member, s.Topic, s.Key, s.Error = n(s.Member), n(s.Topic), txt(s.Key), txt(s.Error)
		c.Stuck[i] = s
	}
	c.Losses = make([]state.LossRecord, len(st.Losses))
	for i, l := range st.Losses {
		l.Member, l.Topic = n(l.Member), n(l.Topic)
		c.Losses[i] = l
	}
	c.Problems = make([]string, len(st.Problems))
	for i, p := range st.Problems {
		c.Problems[i] = txt(p)
	}
	return &c
}

func opt(p *int64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

func printStatus(out io.Writer, st *groupStatus) {
	leader := name(st.Leader)
	if leader == "" {
		leader = "(none)"
	}
	fmt.Fprintf(out, "group %s   leader %s   generation %d   members %d\n", name(st.Group), leader, st.Generation, len(st.Members))
	if p := st.Paused; p != nil {
		fmt.Fprintf(out, "PAUSED since %s by %s", p.At.Format(time.RFC3339), name(p.By))
		if p.Reason != "" {
			fmt.Fprintf(out, ": %s", esc(p.Reason))
		}
		fmt.Fprintln(out, " (members take no records; keyshare group resume)")
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tHOST\tPID\tWEIGHT\tSTARTED\tLEAVING")
	for _, m := range st.Members {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%v\n", name(m.ID), name(m.Host), m.PID, m.Weight, m.Started.Format(time.RFC3339), m.Leaving)
	}
	tw.Flush()
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tRANGE\tSHARE\tOWNER\tSTATE\tWATERMARK\tPENDING\tSAFE\tCOMMITTED\tEND\tLAG")
	for _, p := range st.Partitions {
		for i, r := range p.Ranges {
			owner := name(r.Owner)
			if r.Target != "" {
				owner += " → " + name(r.Target)
			}
			share := fmt.Sprintf("%5.1f%%", 100*float64(r.Hi-r.Lo)/float64(ledger.HashSpace))
			if i == 0 {
				fmt.Fprintf(tw, "%s/%d\t[%d,%d)\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", name(p.Topic), p.Partition, r.Lo, r.Hi, share, owner, name(r.State), opt(r.Watermark), r.Pending, opt(p.Safe), opt(p.Committed), opt(p.End), opt(p.Lag))
			} else {
				fmt.Fprintf(tw, "\t[%d,%d)\t%s\t%s\t%s\t%s\t%d\t\t\t\t\n", r.Lo, r.Hi, share, owner, name(r.State), opt(r.Watermark), r.Pending)
			}
		}
	}
	tw.Flush()
	// Explain the lag: what waits behind unfinished records, what is not
	// fetched yet, and which records hold partitions back.
	for _, p := range st.Partitions {
		if p.Lag == nil || *p.Lag == 0 || p.Safe == nil || p.Fetched == nil || p.End == nil {
			continue
		}
		waiting := max(0, *p.Fetched-*p.Safe)
		fmt.Fprintf(out, "%s/%d lag %d: %d fetched (done or in flight) but held back by the unfinished record at offset %d, %d not yet fetched\n",
			name(p.Topic), p.Partition, *p.Lag, waiting, *p.Safe, max(0, *p.End-*p.Fetched))
	}
	for _, s := range st.Stuck {
		// Key and error come from producers and handlers: escaped, so
		// that no control sequence reaches the operator's terminal.
		line := fmt.Sprintf("%s/%d held at %d by key %s, %s (member %s", name(s.Topic), s.Partition, s.Offset, esc(s.Key), time.Since(s.Since).Round(time.Second), name(s.Member))
		if s.Attempts > 0 {
			line += fmt.Sprintf(", %d failed attempts, last: %s", s.Attempts, esc(s.Error))
		}
		fmt.Fprintln(out, line+")")
	}
	for _, l := range st.Losses {
		fmt.Fprintf(out, "%s/%d lost to retention in range [%d,%d): records from offset %d up to the log start %d (%d known pending), found by %s at %s\n",
			name(l.Topic), l.Partition, l.Lo, l.Hi, l.Window(), l.LogStart, l.Known(), name(l.Member), l.At.Format(time.RFC3339))
	}
	for _, p := range st.Problems {
		fmt.Fprintf(out, "problem: %s\n", esc(p))
	}
}
