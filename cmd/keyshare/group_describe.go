package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/internal/cli"
	"github.com/keyshare/keyshare/internal/keys"
	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/state"
)

// describe prints the group's state line, then status's view of it (or,
// with --json, describeJSON).
func (c *groupCommand) describe(ctx context.Context, fs *flag.FlagSet, args []string) error {
	var asJSON, stateOnly bool
	fs.BoolVar(&asJSON, "json", false, "print JSON (a stable schema: docs/cli.md)")
	fs.BoolVar(&stateOnly, "state", false, "print the state line only (kafka-consumer-groups --describe --state)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if asJSON && stateOnly {
		return cli.Usage(errors.New("give --json or --state, not both (the JSON has the state)"))
	}
	if err := coord.CheckName("--group", c.group); err != nil {
		return cli.Usage(err)
	}
	ks, err := c.kafkaConn.settings()
	if err != nil {
		return err
	}
	cfg, err := c.etcdConn.config()
	if err != nil {
		return err
	}
	g := state.Group{Prefix: c.prefix, Name: c.group}
	cli, err := c.etcdConn.connect(ctx, cfg, keys.New(c.prefix, c.group).Root())
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
	st, err := readStatus(ctx, cli, kc, g)
	if err != nil {
		return err
	}
	gs := stateOfStatus(st)
	if asJSON {
		b, err := json.MarshalIndent(describeOf(st.clipped(), gs), "", "  ")
		if err != nil {
			return err
		}
		_, err = os.Stdout.Write(append(textsafe.JSON(b), '\n'))
		return err
	}
	fmt.Printf("group %s: %s, %d members\n", name(c.group), gs, len(st.Members))
	if !stateOnly {
		printStatus(os.Stdout, st)
	}
	return nil
}

// stateOfStatus is the group's state (admin.StateOf) from what status read.
func stateOfStatus(st *groupStatus) admin.State {
	members := make(map[string]state.Member, len(st.Members))
	for _, m := range st.Members {
		members[m.ID] = m
	}
	var ranges []state.RangeState
	for _, p := range st.Partitions {
		for _, r := range p.Ranges {
			ranges = append(ranges, state.RangeState{Record: state.RangeRecord{Topic: p.Topic, Partition: p.Partition, Lo: r.Lo, Hi: r.Hi, Owner: r.Owner, State: r.State}})
		}
	}
	return admin.StateOf(st.Paused != nil, members, ranges)
}

// describeJSON is describe --json: snake_case names, and only what an
// operator reads; no record versions, revisions or drain budgets. Fields
// are added, never renamed or removed.
type describeJSON struct {
	Group      string              `json:"group"`
	State      admin.State         `json:"state"`
	Leader     string              `json:"leader"`
	Generation int64               `json:"generation"`
	Paused     *describePause      `json:"paused,omitempty"`
	Members    []describeMember    `json:"members"`
	Partitions []describePartition `json:"partitions"`
	Stuck      []describeStuck     `json:"stuck"`
	Losses     []describeLoss      `json:"lost_to_retention"`
	Problems   []string            `json:"problems"`
}

type describePause struct {
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
}

type describeMember struct {
	ID      string    `json:"id"`
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	Weight  int       `json:"weight"`
	Leaving bool      `json:"leaving"`
}

type describePartition struct {
	Topic     string          `json:"topic"`
	Partition int32           `json:"partition"`
	Safe      *int64          `json:"safe_watermark"`
	Committed *int64          `json:"committed"`
	End       *int64          `json:"end_offset"`
	Lag       *int64          `json:"lag"`
	Fetched   *int64          `json:"fetched"`
	Ranges    []describeRange `json:"ranges"`
}

type describeRange struct {
	Lo        uint64 `json:"lo"`
	Hi        uint64 `json:"hi"`
	Owner     string `json:"owner"`
	State     string `json:"state"`
	Target    string `json:"target"`
	Watermark *int64 `json:"watermark"`
	Pending   int    `json:"pending"`
}

type describeStuck struct {
	Member    string    `json:"member"`
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Lo        uint64    `json:"lo"`
	Offset    int64     `json:"offset"`
	Key       string    `json:"key"`
	Since     time.Time `json:"since"`
	Attempts  int       `json:"attempts"`
	Error     string    `json:"error"`
}

type describeLoss struct {
	Member    string             `json:"member"`
	Topic     string             `json:"topic"`
	Partition int32              `json:"partition"`
	Lo        uint64             `json:"lo"`
	Hi        uint64             `json:"hi"`
	At        time.Time          `json:"at"`
	LogStart  int64              `json:"log_start"`
	Segments  []describeLostPart `json:"segments"`
}

type describeLostPart struct {
	Lo         uint64  `json:"lo"`
	Hi         uint64  `json:"hi"`
	Pending    []int64 `json:"pending"`
	UnreadFrom int64   `json:"unread_from"`
}

// describeOf maps status's view to describe's JSON schema. Lists are
// empty, not null, when there is nothing in them.
func describeOf(st *groupStatus, gs admin.State) describeJSON {
	d := describeJSON{Group: st.Group, State: gs, Leader: st.Leader, Generation: st.Generation,
		Members: []describeMember{}, Partitions: []describePartition{}, Stuck: []describeStuck{}, Losses: []describeLoss{}, Problems: []string{}}
	if p := st.Paused; p != nil {
		d.Paused = &describePause{By: p.By, Reason: p.Reason, Since: p.At}
	}
	for _, m := range st.Members {
		d.Members = append(d.Members, describeMember{ID: m.ID, Host: m.Host, PID: m.PID, Started: m.Started, Weight: m.Weight, Leaving: m.Leaving})
	}
	for _, p := range st.Partitions {
		dp := describePartition{Topic: p.Topic, Partition: p.Partition, Safe: p.Safe, Committed: p.Committed, End: p.End, Lag: p.Lag, Fetched: p.Fetched, Ranges: []describeRange{}}
		for _, r := range p.Ranges {
			dp.Ranges = append(dp.Ranges, describeRange(r))
		}
		d.Partitions = append(d.Partitions, dp)
	}
	for _, s := range st.Stuck {
		d.Stuck = append(d.Stuck, describeStuck{Member: s.Member, Topic: s.Topic, Partition: s.Partition, Lo: s.Lo, Offset: s.Offset, Key: s.Key, Since: s.Since, Attempts: s.Attempts, Error: s.Error})
	}
	for _, l := range st.Losses {
		dl := describeLoss{Member: l.Member, Topic: l.Topic, Partition: l.Partition, Lo: l.Lo, Hi: l.Hi, At: l.At, LogStart: l.LogStart, Segments: []describeLostPart{}}
		for _, s := range l.Segments {
			dl.Segments = append(dl.Segments, describeLostPart{Lo: s.Lo, Hi: s.Hi, Pending: append([]int64{}, s.Pending...), UnreadFrom: s.UnreadFrom})
		}
		d.Losses = append(d.Losses, dl)
	}
	d.Problems = append(d.Problems, st.Problems...)
	return d
}

// list prints the groups under --prefix with their states.
func (c *groupCommand) list(ctx context.Context, fs *flag.FlagSet, args []string) error {
	var asJSON bool
	fs.BoolVar(&asJSON, "json", false, "print JSON")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	cfg, err := c.etcdConn.config()
	if err != nil {
		return err
	}
	cli, err := c.etcdConn.connect(ctx, cfg, c.prefix)
	if err != nil {
		return err
	}
	defer cli.Close()
	groups, err := admin.List(ctx, cli, c.prefix)
	if err != nil {
		return err
	}
	if asJSON {
		if groups == nil {
			groups = []admin.Summary{}
		}
		b, err := json.MarshalIndent(groups, "", "  ")
		if err != nil {
			return err
		}
		_, err = os.Stdout.Write(append(textsafe.JSON(b), '\n'))
		return err
	}
	printGroups(os.Stdout, groups)
	return nil
}

func printGroups(w io.Writer, groups []admin.Summary) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tSTATE\tMEMBERS")
	for _, g := range groups {
		fmt.Fprintf(tw, "%s\t%s\t%d\n", name(g.Name), g.State, g.Members)
	}
	tw.Flush()
}
