package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/ledger"
)

// The status table an operator reads on a terminal. Every string it
// prints was read from etcd, where anyone with the group's role can write
// anything: a 1 MB host, a topic key holding ESC, a member id with a bidi
// override. Text output escapes each (textsafe) and cuts it, a name to
// textsafe.MaxKey bytes and other text (a pause reason, a handler's error,
// a damaged value's problem) to textsafe.MaxText, with its true size after
// the cut.

// esc shows text read from etcd safely on a terminal (textsafe.Escape).
func esc(s string) string { return textsafe.Escape(s) }

// name shows a name read from etcd (member id, host, topic, owner)
// safely on a terminal, cut to textsafe.MaxKey bytes.
func name(s string) string { return textsafe.Cut(s, textsafe.MaxKey) }

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

// printStatus prints st as the status command's text: the group's line,
// the members' table, the ranges' table, then a line for each lag, hot
// key, stuck record, key operation, loss and problem.
func printStatus(out io.Writer, st *groupStatus) {
	printGroupLine(out, st)
	printMembers(out, st)
	printRanges(out, st)
	printStatusNotes(out, st)
}

// printGroupLine prints whether etcd is reachable, the group's state and
// leader, and whether it is paused.
func printGroupLine(out io.Writer, st *groupStatus) {
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
}

func printMembers(out io.Writer, st *groupStatus) {
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
}

// printRanges prints a row per range, its partition's figures on the
// partition's first row.
func printRanges(out io.Writer, st *groupStatus) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
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
}

// printStatusNotes prints a line for each lag's parts, hot key, stuck record,
// key operation, loss and problem.
func printStatusNotes(out io.Writer, st *groupStatus) {
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
