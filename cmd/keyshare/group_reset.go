package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/cmd/internal/cli"
)

// resetFlags are reset-offsets' flags as given.
type resetFlags struct {
	topics                           cli.List
	allTopics                        bool
	toEarliest, toLatest, toCurrent  bool
	toOffset, shiftBy                int64
	toDatetime, byDuration, fromFile string
	execute, dryRun, export          bool
	targets                          []string // the target flags given, as --name
}

// resetTargets are the flags of which a reset takes exactly one.
var resetTargets = []string{"to-earliest", "to-latest", "to-current", "to-offset", "to-datetime", "by-duration", "shift-by", "from-file"}

func (f *resetFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.topics, "topic", "T (all partitions), T:P or T:P,P,... (repeatable)")
	fs.BoolVar(&f.allTopics, "all-topics", false, "every topic the group holds state of in etcd")
	fs.BoolVar(&f.toEarliest, "to-earliest", false, "reset to the log start")
	fs.BoolVar(&f.toLatest, "to-latest", false, "reset to the log end")
	fs.BoolVar(&f.toCurrent, "to-current", false, "reset to the committed offset (the log end where none is)")
	fs.Int64Var(&f.toOffset, "to-offset", 0, "reset to this offset (clamped to the log)")
	fs.StringVar(&f.toDatetime, "to-datetime", "", "reset to the first record at or after this time: YYYY-MM-DDTHH:mm:SS[.sss][zone]; without a zone, local time")
	fs.StringVar(&f.byDuration, "by-duration", "", "reset to the first record at or after this long ago: ISO-8601 PnDTnHnMnS, e.g. PT30M")
	fs.Int64Var(&f.shiftBy, "shift-by", 0, "move the committed offset by N (negative: back; clamped to the log)")
	fs.StringVar(&f.fromFile, "from-file", "", "reset each partition to the offset in this CSV file (topic,partition,offset lines, as --export writes)")
	fs.BoolVar(&f.execute, "execute", false, "apply the plan (default: print it only)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "print the plan only (the default)")
	fs.BoolVar(&f.export, "export", false, "print the plan as CSV (topic,partition,offset), for --from-file")
}

// visited records which target flags fs was given.
func (f *resetFlags) visited(fs *flag.FlagSet) {
	fs.Visit(func(fl *flag.Flag) {
		for _, t := range resetTargets {
			if fl.Name == t {
				f.targets = append(f.targets, "--"+t)
			}
		}
	})
}

// reset turns the flags into the reset to plan and the partitions it
// selects, now being the time --by-duration counts back from and loc the
// zone of a --to-datetime without one. For --from-file, the Reset's
// Offsets are left to the caller, which reads the file.
func (f *resetFlags) reset(now time.Time, loc *time.Location) (admin.Reset, []admin.Selector, error) {
	var r admin.Reset
	if len(f.targets) != 1 {
		return r, nil, fmt.Errorf("give exactly one of --%s (got %s)", strings.Join(resetTargets, ", --"), orNone(strings.Join(f.targets, ", ")))
	}
	if f.execute && f.dryRun {
		return r, nil, errors.New("give --execute or --dry-run, not both")
	}
	scopes := 0
	for _, given := range []bool{len(f.topics) > 0, f.allTopics, f.fromFile != ""} {
		if given {
			scopes++
		}
	}
	switch {
	case f.fromFile != "" && scopes > 1:
		return r, nil, errors.New("--from-file names its partitions: drop --topic and --all-topics")
	case scopes == 0:
		return r, nil, errors.New("say which partitions: --topic T, T:P or T:P,P,..., or --all-topics")
	case scopes > 1:
		return r, nil, errors.New("give --topic or --all-topics, not both")
	}
	var sel []admin.Selector
	for _, t := range f.topics {
		s, err := parseTopicSpec(t)
		if err != nil {
			return r, nil, err
		}
		sel = append(sel, s...)
	}
	switch f.targets[0] {
	case "--to-earliest":
		r.To = admin.ToEarliest
	case "--to-latest":
		r.To = admin.ToLatest
	case "--to-current":
		r.To = admin.ToCurrent
	case "--to-offset":
		if f.toOffset < 0 {
			return r, nil, fmt.Errorf("--to-offset %d: want an offset, 0 or more (--to-earliest for the log start)", f.toOffset)
		}
		r.To, r.Offset = admin.ToOffset, f.toOffset
	case "--shift-by":
		r.To, r.Shift = admin.ShiftBy, f.shiftBy
	case "--to-datetime":
		t, err := parseDatetime(f.toDatetime, loc)
		if err != nil {
			return r, nil, err
		}
		r.To, r.Time = admin.ToDatetime, t
	case "--by-duration":
		d, err := parseISODuration(f.byDuration)
		if err != nil {
			return r, nil, err
		}
		r.To, r.Time = admin.ToDatetime, now.Add(-d)
	case "--from-file":
		r.To = admin.ToOffsets
	}
	return r, sel, nil
}

func (c *groupCommand) reset(ctx context.Context, fs *flag.FlagSet, args []string) error {
	var f resetFlags
	f.register(fs)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	f.visited(fs)
	r, sel, err := f.reset(time.Now(), time.Local)
	if err != nil {
		return cli.Usage(err)
	}
	if r.To == admin.ToOffsets {
		if r.Offsets, err = readOffsetsFile(f.fromFile); err != nil {
			return cli.Usage(err)
		}
	}
	cli, g, _, err := c.open(ctx, true)
	if err != nil {
		return err
	}
	defer cli.Close()
	defer g.Close()
	if f.allTopics {
		topics, err := g.Topics(ctx)
		if err != nil {
			return err
		}
		if len(topics) == 0 {
			return fmt.Errorf("--all-topics: group %s holds no topic's state in etcd; name them with --topic", c.group)
		}
		for _, t := range topics {
			sel = append(sel, admin.Selector{Topic: t, Partition: -1})
		}
	}
	plan, err := g.PlanReset(ctx, sel, r)
	if err != nil {
		return err
	}
	// With --export, standard output is the CSV alone; the rest goes to
	// standard error.
	msg := os.Stdout
	if f.export {
		msg = os.Stderr
	}
	if r.To == admin.ToDatetime {
		fmt.Fprintf(msg, "target time: %s\n", r.Time.UTC().Format(time.RFC3339Nano))
	}
	if f.export {
		if err := writeOffsetsCSV(os.Stdout, plan); err != nil {
			return err
		}
		printNotes(os.Stderr, plan)
	} else {
		printPlan(os.Stdout, plan)
	}
	if !f.execute {
		fmt.Fprintln(msg, "dry run: nothing changed; add --execute to apply")
		return nil
	}
	if err := g.ApplyReset(ctx, plan); err != nil {
		return err
	}
	fmt.Fprintf(msg, "reset %d partitions of group %s\n", len(plan), c.group)
	return nil
}

// readOffsetsFile reads a --from-file plan ("-": standard input).
func readOffsetsFile(name string) ([]admin.PartitionOffset, error) {
	if name == "-" {
		return parseOffsetsCSV("(stdin)", os.Stdin)
	}
	fh, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("--from-file: %w", err)
	}
	defer fh.Close()
	return parseOffsetsCSV(name, fh)
}

// printPlan prints the plan as a table, with a NOTE column saying where
// a target was clamped or had no answer.
func printPlan(w io.Writer, plan []admin.PlanRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tCURRENT\tNEW\tLOG START\tLOG END\tNOTE")
	for _, row := range plan {
		cur := "-"
		if row.Current >= 0 {
			cur = strconv.FormatInt(row.Current, 10)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%s\n", name(row.Topic), row.Partition, cur, row.New, row.LogStart, row.LogEnd, row.Note)
	}
	tw.Flush()
}

// printNotes prints the plan's notes, one line per partition that has one.
func printNotes(w io.Writer, plan []admin.PlanRow) {
	for _, row := range plan {
		if row.Note != "" {
			fmt.Fprintf(w, "%s/%d: %s\n", name(row.Topic), row.Partition, row.Note)
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
