package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/cmd/internal/cli"
	"github.com/keyshare/keyshare/cmd/internal/clientflags"
	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/statestore"
)

// keyCommand inspects one key across a group: keyshare key describe.
type keyCommand struct {
	groupCommand // the group's connection flags and open
}

// keySubcommands are the subcommands of keyshare key.
var keySubcommands = []string{"describe", "skip", "park", "unpark", "replay", "cancel", "delete-state"}

const keyUsage = `Usage: keyshare key describe --group G --topic T [--partition P] [--state] [flags] KEY
       keyshare key skip --group G --topic T [--partition P] --offset O [--drop] [--reason TEXT] KEY
       keyshare key park --group G --topic T [--partition P] [--park-topic T2] [--reason TEXT] KEY
       keyshare key unpark --group G --topic T [--partition P] KEY
       keyshare key replay --group G --topic T [--partition P] --from O [--reason TEXT] KEY
       keyshare key cancel --group G --topic T [--partition P] KEY
       keyshare key delete-state --group G --topic T [--partition P] [--changelog C] [--wait D] KEY

  describe   the key's partition and hash, the member and range that own it,
             its records not yet handled (read from Kafka from the range's
             watermark), the error holding it if it is stuck, the
             operation set on it, and with --state its keyed state from the
             changelog (--json)
  skip       the key's owner dead-letters its head record O (the stuck one,
             or its lowest pending), or drops it with --drop, instead of
             handling it; the key's later records then run
  park       the key's owner copies the key's records, in order, to a parking
             topic (default T.keyshare-parked, created if absent) instead of
             handling them; other keys go on
  unpark     the key's owner handles its parked records first, in their
             order, then its newer ones
  replay     the key's owner runs the key's records from offset O again, in
             order, before its next live record
  cancel     delete the operation set on the key
  delete-state
             delete the key's keyed state (a tombstone in its changelog),
             with the group paused or stopped; waits up to --wait (30s)
             for the owner of the key's range to hand the tombstone back
`

func (c *keyCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprint(os.Stderr, keyUsage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return flag.ErrHelp
		}
		return cli.Usage(errors.New("want a subcommand: describe, skip, park, unpark, replay, cancel or delete-state"))
	}
	sub, args := args[0], args[1:]
	if !slices.Contains(keySubcommands, sub) {
		return cli.Usage(fmt.Errorf("unknown key subcommand %q: want describe, skip, park, unpark, replay, cancel or delete-state", sub))
	}
	fs := flag.NewFlagSet("key "+sub, flag.ContinueOnError)
	c.etcdConn.Register(fs)
	c.kafkaConn.Register(fs, clientflags.DefaultBrokers, "Kafka bootstrap servers")
	fs.StringVar(&c.group, "group", "", "group name (required)")
	fs.StringVar(&c.prefix, "prefix", schema.DefaultPrefix, "etcd prefix of all groups")
	switch sub {
	case "skip":
		return c.skip(ctx, fs, args)
	case "park":
		return c.park(ctx, fs, args)
	case "unpark":
		return c.unpark(ctx, fs, args)
	case "replay":
		return c.replay(ctx, fs, args)
	case "cancel":
		return c.cancel(ctx, fs, args)
	case "delete-state":
		return c.deleteState(ctx, fs, args)
	}
	return c.describe(ctx, fs, args)
}

// keyQueryFlags registers the flags that name a key's partition on fs;
// parse reads them and the positional KEY from args (verb names the
// command in errors).
func keyQueryFlags(fs *flag.FlagSet) (q *admin.KeyQuery, parse func(args []string, verb string) error) {
	q = &admin.KeyQuery{Partition: -1}
	var partitioner string
	fs.StringVar(&q.Topic, "topic", "", "the key's topic (required)")
	fs.Func("partition", "the key's partition (default: computed by --partitioner)", func(v string) error {
		p, err := strconv.ParseInt(v, 10, 32)
		if err != nil || p < 0 {
			return fmt.Errorf("want a partition number, 0 or more")
		}
		q.Partition = int32(p)
		return nil
	})
	fs.StringVar(&partitioner, "partitioner", string(admin.ConsistentRandom),
		"how the producer chose the partition, when --partition is not given: consistent_random (librdkafka's default: confluent-kafka-go, keyshare produce), murmur2 (the Java client's default) or crc32 (librdkafka's consistent)")
	fs.IntVar(&q.MaxScan, "max-scan", admin.DefaultMaxScan, "read at most this many records of the partition, from the range's watermark")
	return q, func(args []string, verb string) error {
		flags, keys := splitKeyArgs(fs, args)
		if err := cli.Parse(fs, flags); err != nil {
			return err
		}
		switch {
		case len(keys) == 0:
			return cli.Usage(fmt.Errorf("want the KEY to %s, after the flags (-- KEY for a key that starts with -)", verb))
		case len(keys) > 1:
			return cli.Usage(fmt.Errorf("want one KEY, got %d: %s", len(keys), textsafe.FirstFew(keys, ", ", textsafe.Quote)))
		case q.Topic == "":
			return cli.Usage(errors.New("--topic is required"))
		case q.MaxScan < 1:
			return cli.Usage(fmt.Errorf("--max-scan %d: want 1 or more", q.MaxScan))
		}
		q.Key = []byte(keys[0])
		p, err := admin.ParsePartitioner(partitioner)
		if err != nil {
			return cli.Usage(fmt.Errorf("--%w", err))
		}
		q.Partitioner = p
		if q.Partition < 0 && p == admin.ConsistentRandom && len(q.Key) == 0 {
			return cli.Usage(errors.New("an empty KEY: consistent_random places it in a random partition; give --partition"))
		}
		return nil
	}
}

// describe prints what the group knows of one key (admin.DescribeKey).
func (c *keyCommand) describe(ctx context.Context, fs *flag.FlagSet, args []string) error {
	var asJSON, withState bool
	var changelog string
	fs.BoolVar(&asJSON, "json", false, "print JSON (a stable schema: docs/cli.md)")
	fs.BoolVar(&withState, "state", false, "also read the key's keyed state from its changelog (docs/state.md); reads the whole changelog partition")
	fs.StringVar(&changelog, "changelog", "", "the changelog topic, with --state (default GROUP-TOPIC-state)")
	qp, parse := keyQueryFlags(fs)
	if err := parse(args, "describe"); err != nil {
		return err
	}
	q := *qp
	etcd, g, ks, info, err := c.openAndDescribe(ctx, q)
	if err != nil {
		return err
	}
	defer etcd.Close()
	defer g.Close()
	var st *statestore.KeyState
	if withState {
		read, err := c.readKeyState(ctx, ks, changelog, info.Topic, info.Partition, q.Key)
		if err != nil {
			return err
		}
		st = &read
	}
	if asJSON {
		out := keyJSONOf(q.Key, info)
		if st != nil {
			out.State = keyStateJSONOf(*st)
		}
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		_, err = os.Stdout.Write(append(textsafe.JSON(b), '\n'))
		return err
	}
	printKey(os.Stdout, q.Key, info, time.Now())
	if st != nil {
		printKeyState(os.Stdout, *st)
	}
	return nil
}

// openAndDescribe opens the group and describes q's key
// (admin.DescribeKey). A topic the group does not consume, or a partition
// the topic does not have, is the command line's fault: a usage error,
// exit status 2. The caller closes etcd and g.
func (c *keyCommand) openAndDescribe(ctx context.Context, q admin.KeyQuery) (*clientv3.Client, *admin.Group, *clientflags.KafkaSettings, admin.KeyInfo, error) {
	etcd, g, ks, err := c.open(ctx, true)
	if err != nil {
		return nil, nil, nil, admin.KeyInfo{}, err
	}
	info, err := g.DescribeKey(ctx, q)
	if errors.Is(err, admin.ErrBadKeyQuery) {
		err = cli.Usage(err)
	}
	if err != nil {
		g.Close()
		etcd.Close()
		return nil, nil, nil, admin.KeyInfo{}, err
	}
	return etcd, g, ks, info, nil
}

// splitKeyArgs separates the positional KEY from the flags, wherever it
// stands: a word that is neither a flag nor a flag's value. After "--"
// every word is a key.
func splitKeyArgs(fs *flag.FlagSet, args []string) (flags, keys []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return flags, append(keys, args[i+1:]...)
		}
		if len(a) < 2 || a[0] != '-' {
			keys = append(keys, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue // cli.Parse names it
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			flags = append(flags, args[i+1])
			i++
		}
	}
	return flags, keys
}

// pendingShown is how many pending offsets the text form lists.
const pendingShown = 20

// printKey prints info as lines an operator reads top to bottom.
func printKey(w io.Writer, key []byte, info admin.KeyInfo, now time.Time) {
	how := "given"
	if info.PartitionFrom != "given" {
		how = "computed with " + info.PartitionFrom
	}
	fmt.Fprintf(w, "key        %s\n", textsafe.Quote(string(key)))
	fmt.Fprintf(w, "partition  %s/%d (%s)\n", name(info.Topic), info.Partition, how)
	fmt.Fprintf(w, "hash       %d (0x%08x)\n", info.Hash, info.Hash)
	if r := info.Range; r != nil {
		live := "live"
		if !r.OwnerLive {
			live = "gone: the leader fails its ranges over"
		}
		state := r.State
		if r.Target != "" {
			state += " to " + name(r.Target)
		}
		fmt.Fprintf(w, "owner      %s (%s)\n", name(r.Owner), live)
		fmt.Fprintf(w, "range      [%d,%d) %s, generation %d\n", r.Lo, r.Hi, state, r.Generation)
		if r.Watermark >= 0 {
			fmt.Fprintf(w, "watermark  %d (ledger seen up to %d)\n", r.Watermark, r.Next)
		} else {
			fmt.Fprintln(w, "watermark  none yet: the range has no ledger state, its owner starts at the committed offset")
		}
	} else {
		fmt.Fprintln(w, "owner      none: no range holds the hash yet (the leader has not assigned the partition)")
	}
	sc := info.Scan
	switch n := len(info.Pending); {
	case n == 0:
		fmt.Fprintln(w, "pending    none")
	default:
		var b strings.Builder
		for i, o := range info.Pending[:min(n, pendingShown)] {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.FormatInt(o, 10))
		}
		if n > pendingShown {
			fmt.Fprintf(&b, " and %d more (--json lists them all)", n-pendingShown)
		}
		fmt.Fprintf(w, "pending    %d: %s\n", n, b.String())
	}
	if s := info.Stuck; s != nil {
		why := "no error yet: the handler has not returned"
		if s.Error != "" {
			why = "last error: " + s.Error
		}
		fmt.Fprintf(w, "stuck      at offset %d since %s (%s), %d failed attempts on %s; %s\n", s.Offset, s.Since.UTC().Format(time.RFC3339),
			now.Sub(s.Since).Round(time.Second), s.Attempts, name(s.Member), why)
	} else {
		fmt.Fprintln(w, "stuck      no")
	}
	printKeyOp(w, info.Op)
	if info.LastHandled >= 0 {
		fmt.Fprintf(w, "handled    up to offset %d\n", info.LastHandled)
	} else {
		fmt.Fprintln(w, "handled    unknown (its records below the watermark are handled; the ledger does not keep which were this key's)")
	}
	end := "the log end"
	if !sc.Complete {
		end = fmt.Sprintf("stopped early at --max-scan; the log ends at %d", sc.End)
	}
	from := "the watermark"
	if sc.FromCommit {
		from = "the committed offset"
	}
	fmt.Fprintf(w, "scanned    %d records, offsets [%d,%d) (from %s to %s)\n", sc.Records, sc.From, sc.Stop, from, end)
}

// keyJSON is key describe's --json form (docs/cli.md).
type keyJSON struct {
	Key           string        `json:"key"`
	Topic         string        `json:"topic"`
	Partition     int32         `json:"partition"`
	PartitionFrom string        `json:"partition_from"`
	Hash          uint32        `json:"hash"`
	Range         *keyRangeJSON `json:"range"`
	Pending       []int64       `json:"pending"`
	LastHandled   *int64        `json:"last_handled"`
	Stuck         *keyStuckJSON `json:"stuck"`
	Op            *keyOpJSON    `json:"op"`
	Scan          keyScanJSON   `json:"scan"`
	State         *keyStateJSON `json:"state,omitempty"` // with --state
}

type keyRangeJSON struct {
	Lo         uint64 `json:"lo"`
	Hi         uint64 `json:"hi"`
	Owner      string `json:"owner"`
	OwnerLive  bool   `json:"owner_live"`
	State      string `json:"state"`
	Target     string `json:"target,omitempty"`
	Generation int64  `json:"generation"`
	Watermark  *int64 `json:"watermark"`
	Next       *int64 `json:"next"`
}

type keyStuckJSON struct {
	Offset   int64     `json:"offset"`
	Member   string    `json:"member"`
	Since    time.Time `json:"since"`
	Attempts int       `json:"attempts"`
	Error    string    `json:"error"`
}

type keyScanJSON struct {
	From       int64 `json:"from"`
	Stop       int64 `json:"stop"`
	End        int64 `json:"end"`
	Records    int   `json:"records"`
	Complete   bool  `json:"complete"`
	FromCommit bool  `json:"from_commit"`
}

func keyJSONOf(key []byte, info admin.KeyInfo) keyJSON {
	opt := func(v int64) *int64 {
		if v < 0 {
			return nil
		}
		return &v
	}
	out := keyJSON{Key: textsafe.Bytes(key), Topic: info.Topic, Partition: info.Partition, PartitionFrom: info.PartitionFrom, Hash: info.Hash,
		Pending: info.Pending, LastHandled: opt(info.LastHandled),
		Scan: keyScanJSON{From: info.Scan.From, Stop: info.Scan.Stop, End: info.Scan.End, Records: info.Scan.Records, Complete: info.Scan.Complete, FromCommit: info.Scan.FromCommit}}
	if out.Pending == nil {
		out.Pending = []int64{}
	}
	if r := info.Range; r != nil {
		out.Range = &keyRangeJSON{Lo: r.Lo, Hi: r.Hi, Owner: r.Owner, OwnerLive: r.OwnerLive, State: r.State, Target: r.Target, Generation: r.Generation,
			Watermark: opt(r.Watermark), Next: opt(r.Next)}
	}
	if info.Op != nil {
		op := keyOpJSONOf(*info.Op)
		out.Op = &op
	}
	if s := info.Stuck; s != nil {
		out.Stuck = &keyStuckJSON{Offset: s.Offset, Member: s.Member, Since: s.Since, Attempts: s.Attempts, Error: s.Error}
	}
	return out
}
