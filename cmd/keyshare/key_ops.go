package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/cmd/internal/cli"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/internal/textsafe"
)

// skip sets a skip of one key's head record (admin.SkipKey).
func (c *keyCommand) skip(ctx context.Context, fs *flag.FlagSet, args []string) error {
	offset := int64(-1)
	var drop bool
	var reason string
	fs.Int64Var(&offset, "offset", -1, "the key's head offset: the record its stuck report names, or its lowest pending (keyshare key describe; required)")
	fs.BoolVar(&drop, "drop", false, "drop the record instead of writing it to the dead-letter topic (required on members with no dead-letter topic)")
	fs.StringVar(&reason, "reason", "", "why, for the dead letter's cause and the log")
	q, parse := keyQueryFlags(fs)
	if err := parse(args, "skip"); err != nil {
		return err
	}
	if offset < 0 {
		return cli.Usage(fmt.Errorf("--offset %d: want the key's head offset, 0 or more (keyshare key describe shows it)", offset))
	}
	op, err := c.setKeyOp(ctx, func(g *admin.Group) (admin.KeyOp, error) {
		return g.SkipKey(ctx, admin.SkipRequest{KeyQuery: *q, Offset: offset, Drop: drop, Reason: reason, By: operator()})
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "skip set: key %s of %s/%d, offset %d (%s); its owner applies it at the record's next attempt\n",
		textsafe.Quote(string(op.Key)), name(op.Topic), op.Partition, op.Offset, skipFate(op))
	return nil
}

// park parks one key (admin.ParkKey).
func (c *keyCommand) park(ctx context.Context, fs *flag.FlagSet, args []string) error {
	var parkTopic, reason string
	fs.StringVar(&parkTopic, "park-topic", "", "the parking topic (default: the key's topic with "+admin.ParkedSuffix+"; created if absent with the key's topic's partition count)")
	fs.StringVar(&reason, "reason", "", "why, for status and the log")
	q, parse := keyQueryFlags(fs)
	if err := parse(args, "park"); err != nil {
		return err
	}
	op, err := c.setKeyOp(ctx, func(g *admin.Group) (admin.KeyOp, error) {
		return g.ParkKey(ctx, admin.ParkRequest{KeyQuery: *q, ParkTopic: parkTopic, Reason: reason, By: operator()})
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "park set: key %s of %s/%d, its records copied to %s/%d from offset %d on; its owner applies it within about a second\n",
		textsafe.Quote(string(op.Key)), name(op.Topic), op.Partition, name(op.ParkTopic), op.Partition, op.ParkFrom)
	return nil
}

// unpark unparks one key (admin.UnparkKey).
func (c *keyCommand) unpark(ctx context.Context, fs *flag.FlagSet, args []string) error {
	q, parse := keyQueryFlags(fs)
	if err := parse(args, "unpark"); err != nil {
		return err
	}
	op, err := c.setKeyOp(ctx, func(g *admin.Group) (admin.KeyOp, error) {
		return g.UnparkKey(ctx, admin.UnparkRequest{KeyQuery: *q, By: operator()})
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "unpark set: key %s of %s/%d; its owner handles its records parked in %s/%d from offset %d first, then its newer ones (key describe shows the progress)\n",
		textsafe.Quote(string(op.Key)), name(op.Topic), op.Partition, name(op.ParkTopic), op.Partition, op.ParkFrom)
	return nil
}

// replay replays one key from an offset (admin.ReplayKey).
func (c *keyCommand) replay(ctx context.Context, fs *flag.FlagSet, args []string) error {
	from := int64(-1)
	var reason string
	fs.Int64Var(&from, "from", -1, "the first offset to run again: at or above the log start, at or below the key's last handled record (required)")
	fs.StringVar(&reason, "reason", "", "why, for status and the log")
	q, parse := keyQueryFlags(fs)
	if err := parse(args, "replay"); err != nil {
		return err
	}
	if from < 0 {
		return cli.Usage(fmt.Errorf("--from %d: want the first offset to run again, 0 or more", from))
	}
	op, err := c.setKeyOp(ctx, func(g *admin.Group) (admin.KeyOp, error) {
		return g.ReplayKey(ctx, admin.ReplayRequest{KeyQuery: *q, From: from, Reason: reason, By: operator()})
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "replay set: key %s of %s/%d from offset %d; its owner runs its records from there again, in order, before its next live record\n",
		textsafe.Quote(string(op.Key)), name(op.Topic), op.Partition, op.Offset)
	return nil
}

// cancel deletes the operation set on one key (admin.CancelKeyOp).
func (c *keyCommand) cancel(ctx context.Context, fs *flag.FlagSet, args []string) error {
	q, parse := keyQueryFlags(fs)
	if err := parse(args, "cancel"); err != nil {
		return err
	}
	op, err := c.setKeyOp(ctx, func(g *admin.Group) (admin.KeyOp, error) { return g.CancelKeyOp(ctx, *q) })
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "cancelled: %s\n", describeKeyOp(op))
	return nil
}

// setKeyOp opens the group and runs set, one of admin's key operations,
// on it; a refusal of the command line's input (admin.ErrBadKeyQuery) is a
// usage error: exit status 2, nothing stored.
func (c *keyCommand) setKeyOp(ctx context.Context, set func(*admin.Group) (admin.KeyOp, error)) (admin.KeyOp, error) {
	etcd, g, _, err := c.open(ctx, true)
	if err != nil {
		return admin.KeyOp{}, err
	}
	defer etcd.Close()
	defer g.Close()
	op, err := set(g)
	if errors.Is(err, admin.ErrBadKeyQuery) {
		return admin.KeyOp{}, cli.Usage(err)
	}
	return op, err
}

// skipFate says what a skip does with its record.
func skipFate(op admin.KeyOp) string {
	if op.Drop {
		return "dropped"
	}
	return "to the dead-letter topic"
}

// keyOpWhat says what an operation does.
func keyOpWhat(op admin.KeyOp) string {
	switch op.Op {
	case "park":
		return fmt.Sprintf("park into %s/%d (from offset %d)", name(op.ParkTopic), op.Partition, op.ParkFrom)
	case "unpark":
		return fmt.Sprintf("unpark from %s/%d (parked from offset %d, handled up to %d)", name(op.ParkTopic), op.Partition, op.ParkFrom, op.Next)
	case "replay":
		to := "its next live record"
		if op.ReplayTo > 0 {
			to = strconv.FormatInt(op.ReplayTo, 10)
		}
		return fmt.Sprintf("replay from offset %d to %s (handled up to %d)", op.Offset, to, op.Next)
	}
	return fmt.Sprintf("%s of offset %d (%s)", op.Op, op.Offset, skipFate(op))
}

// describeKeyOp is an operation in one line.
func describeKeyOp(op admin.KeyOp) string {
	if op.Problem != "" {
		return "damaged, not applied: " + textsafe.Escape(op.Problem)
	}
	s := fmt.Sprintf("%s by %s at %s", keyOpWhat(op), textsafe.Quote(op.By), op.At.UTC().Format(time.RFC3339))
	if op.Reason != "" {
		s += ": " + textsafe.Quote(op.Reason)
	}
	if op.Refused != "" {
		s += "; REFUSED by " + textsafe.Escape(op.Refused)
	}
	return s
}

// printKeyOp is key describe's operation line.
func printKeyOp(w io.Writer, op *admin.KeyOp) {
	if op == nil {
		fmt.Fprintln(w, "operation  none")
		return
	}
	fmt.Fprintf(w, "operation  %s\n", describeKeyOp(*op))
}

// keyOpJSON is an operation in key describe's and status's --json.
type keyOpJSON struct {
	Op        string    `json:"op,omitempty"`
	Topic     string    `json:"topic,omitempty"`
	Partition int32     `json:"partition"`
	Key       string    `json:"key"`
	Offset    int64     `json:"offset"`
	Drop      bool      `json:"drop"`
	ParkTopic string    `json:"park_topic,omitempty"`
	ParkFrom  int64     `json:"park_from,omitempty"`
	Next      int64     `json:"next,omitempty"`
	ReplayTo  int64     `json:"replay_to,omitempty"`
	By        string    `json:"by,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	At        time.Time `json:"at"`
	Refused   string    `json:"refused,omitempty"`
	Problem   string    `json:"problem,omitempty"`
}

func keyOpJSONOf(op admin.KeyOp) keyOpJSON {
	return keyOpJSON{Op: op.Op, Topic: op.Topic, Partition: op.Partition, Key: textsafe.Bytes(op.Key), Offset: op.Offset, Drop: op.Drop,
		ParkTopic: op.ParkTopic, ParkFrom: op.ParkFrom, Next: op.Next, ReplayTo: op.ReplayTo, By: op.By, Reason: op.Reason, At: op.At, Refused: op.Refused, Problem: op.Problem}
}

// keyOpsStatus is status's list of the operations set on keys.
func keyOpsStatus(ops []coord.KeyOp) []keyOpJSON {
	var out []keyOpJSON
	for _, op := range ops {
		if op.Err != nil {
			out = append(out, keyOpJSON{Problem: op.Err.Error()})
			continue
		}
		r := op.Record
		out = append(out, keyOpJSONOf(admin.KeyOp{Op: r.Op, Topic: r.Topic, Partition: r.Partition, Key: r.Key, Offset: r.Offset, Drop: r.Drop,
			ParkTopic: r.ParkTopic, ParkFrom: r.ParkFrom, Next: r.Next, ReplayTo: r.ReplayTo, By: r.By, Reason: r.Reason, At: r.At, Refused: r.Refused}))
	}
	return out
}

// keyOpLine is status's line for an operation set on a key.
func keyOpLine(op keyOpJSON) string {
	if op.Problem != "" {
		return "key operation damaged, not applied: " + esc(op.Problem)
	}
	line := fmt.Sprintf("%s/%d key %s: %s set by %s at %s", name(op.Topic), op.Partition, esc(op.Key),
		keyOpWhat(admin.KeyOp{Op: op.Op, Partition: op.Partition, Offset: op.Offset, Drop: op.Drop, ParkTopic: op.ParkTopic, ParkFrom: op.ParkFrom, Next: op.Next, ReplayTo: op.ReplayTo}),
		esc(op.By), op.At.UTC().Format(time.RFC3339))
	if op.Reason != "" {
		line += ": " + esc(op.Reason)
	}
	if op.Refused != "" {
		line += "; REFUSED by " + esc(op.Refused)
	}
	return line
}
