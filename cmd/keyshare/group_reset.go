package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/internal/cli"
)

func (c *groupCommand) reset(ctx context.Context, fs *flag.FlagSet, args []string) error {
	var topics listFlag
	var toEarliest, toLatest, execute bool
	var toOffset, shiftBy int64
	var toDatetime string
	fs.Var(&topics, "topic", "T (all partitions) or T:P (repeatable, at least one)")
	fs.BoolVar(&toEarliest, "to-earliest", false, "reset to the log start")
	fs.BoolVar(&toLatest, "to-latest", false, "reset to the log end")
	fs.Int64Var(&toOffset, "to-offset", 0, "reset to this offset")
	fs.StringVar(&toDatetime, "to-datetime", "", "reset to the first record at or after this time (RFC 3339, e.g. 2024-05-01T12:00:00Z)")
	fs.Int64Var(&shiftBy, "shift-by", 0, "move the committed offset by N (negative: back)")
	fs.BoolVar(&execute, "execute", false, "apply the plan (default: print it only)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	var modes []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "to-earliest", "to-latest", "to-offset", "to-datetime", "shift-by":
			modes = append(modes, "--"+f.Name)
		}
	})
	if len(modes) != 1 {
		return cli.Usage(fmt.Errorf("give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by (got %s)", orNone(strings.Join(modes, ", "))))
	}
	if len(topics) == 0 {
		return cli.Usage(errors.New("--topic T or T:P is required"))
	}
	r := admin.Reset{Offset: toOffset, Shift: shiftBy}
	switch modes[0] {
	case "--to-earliest":
		r.To = admin.ToEarliest
	case "--to-latest":
		r.To = admin.ToLatest
	case "--to-offset":
		r.To = admin.ToOffset
	case "--shift-by":
		r.To = admin.ShiftBy
	case "--to-datetime":
		t, err := time.Parse(time.RFC3339, toDatetime)
		if err != nil {
			return cli.Usage(fmt.Errorf("--to-datetime %q: want RFC 3339, e.g. 2024-05-01T12:00:00Z", toDatetime))
		}
		r.To, r.Time = admin.ToDatetime, t
	}
	var sel []admin.Selector
	for _, t := range topics {
		name, p, hasP := strings.Cut(t, ":")
		s := admin.Selector{Topic: name, Partition: -1}
		if hasP {
			n, err := strconv.ParseInt(p, 10, 32)
			if err != nil || n < 0 {
				return cli.Usage(fmt.Errorf("--topic %q: want T or T:P with P a partition number", t))
			}
			s.Partition = int32(n)
		}
		if err := coord.CheckName("--topic", name); err != nil {
			return cli.Usage(err)
		}
		sel = append(sel, s)
	}
	cli, g, _, err := c.open(ctx, true)
	if err != nil {
		return err
	}
	defer cli.Close()
	defer g.Close()
	plan, err := g.PlanReset(ctx, sel, r)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tCURRENT\tNEW\tLOG START\tLOG END")
	for _, row := range plan {
		cur := "-"
		if row.Current >= 0 {
			cur = strconv.FormatInt(row.Current, 10)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\n", row.Topic, row.Partition, cur, row.New, row.LogStart, row.LogEnd)
	}
	tw.Flush()
	if !execute {
		fmt.Println("dry run: nothing changed; add --execute to apply")
		return nil
	}
	if err := g.ApplyReset(ctx, plan); err != nil {
		return err
	}
	fmt.Printf("reset %d partitions of group %s\n", len(plan), c.group)
	return nil
}
