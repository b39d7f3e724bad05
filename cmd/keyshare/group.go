package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/cmd/internal/cli"
	"github.com/keyshare/keyshare/cmd/internal/clientflags"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
)

// groupCommand administers groups: list, describe, reset-offsets, pause,
// resume, delete.
type groupCommand struct {
	etcdConn      clientflags.Etcd
	kafkaConn     clientflags.Kafka
	group, prefix string
}

const groupUsage = `Usage: keyshare group <list|describe|reset-offsets|pause|resume|delete> [--group G] [flags]

  list            the groups under --prefix, with their state and members
  describe        state (Stable, Rebalancing, Empty, Paused), members, ranges,
                  watermarks, committed and end offsets, lag (--json)
  reset-offsets   which partitions: --topic T, T:P or T:P,P,... (repeatable),
                  --all-topics, or --from-file FILE; one target of
                  --to-earliest, --to-latest, --to-current, --to-offset N,
                  --to-datetime T, --by-duration PnDTnHnMnS, --shift-by N,
                  --from-file FILE (topic,partition,offset lines); targets
                  outside the log are clamped to it. Prints the plan (--export:
                  as CSV), applies it with --execute (refused while members
                  run, unless the group is paused: they then start at the new
                  offsets when it is resumed)
  pause           members stop taking records (in-flight ones finish) and keep
                  their ranges; lasts across member restarts (--reason TEXT)
  resume          members take records again
  delete          remove the group's etcd state (--kafka-offsets: and its
                  Kafka committed offsets); refused while members run
`

func (c *groupCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprint(os.Stderr, groupUsage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return flag.ErrHelp
		}
		return cli.Usage(errors.New("want a subcommand: list, describe, reset-offsets, pause, resume or delete"))
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("group "+sub, flag.ContinueOnError)
	c.etcdConn.Register(fs)
	brokers := "" // describe shows offsets only when asked; pause and resume need none
	if sub == "reset-offsets" || sub == "delete" {
		brokers = clientflags.DefaultBrokers
	}
	c.kafkaConn.Register(fs, brokers, "Kafka bootstrap servers")
	fs.StringVar(&c.group, "group", "", "group name (required but for list)")
	fs.StringVar(&c.prefix, "prefix", schema.DefaultPrefix, "etcd prefix of all groups")
	switch sub {
	case "list":
		return c.list(ctx, fs, args)
	case "describe":
		return c.describe(ctx, fs, args)
	case "reset-offsets":
		return c.reset(ctx, fs, args)
	case "pause", "resume":
		return c.pause(ctx, fs, args, sub == "pause")
	case "delete":
		return c.delete(ctx, fs, args)
	}
	return cli.Usage(fmt.Errorf("unknown group subcommand %q: want list, describe, reset-offsets, pause, resume or delete", sub))
}

// open parses the connection flags and connects to etcd, and to Kafka when
// needKafka.
func (c *groupCommand) open(ctx context.Context, needKafka bool) (*clientv3.Client, *admin.Group, *clientflags.KafkaSettings, error) {
	if err := coord.CheckName("--group", c.group); err != nil {
		return nil, nil, nil, cli.Usage(err)
	}
	ks, err := c.kafkaConn.Settings()
	if err != nil {
		return nil, nil, nil, err
	}
	if needKafka && !ks.Has() {
		return nil, nil, nil, cli.Usage(errors.New("--brokers (or bootstrap.servers in --kafka-config or -X) is required"))
	}
	cfg, err := c.etcdConn.Config()
	if err != nil {
		return nil, nil, nil, err
	}
	cli, err := c.etcdConn.Connect(ctx, cfg, schema.Group{Prefix: c.prefix, Name: c.group}.Keys().Root())
	if err != nil {
		return nil, nil, nil, err
	}
	var kcfg kafka.ConfigMap
	if needKafka {
		if err := clientflags.CheckKafka(ctx, ks); err != nil {
			cli.Close()
			return nil, nil, nil, err
		}
		kcfg = ks.With(nil)
	}
	g, err := admin.Open(cli, kcfg, c.prefix, c.group)
	if err != nil {
		cli.Close()
		return nil, nil, nil, ks.Explain(err)
	}
	return cli, g, ks, nil
}

func (c *groupCommand) delete(ctx context.Context, fs *flag.FlagSet, args []string) error {
	var kafkaOffsets bool
	fs.BoolVar(&kafkaOffsets, "kafka-offsets", false, "also delete the group's committed offsets in Kafka (DeleteConsumerGroups)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	cli, g, _, err := c.open(ctx, kafkaOffsets)
	if err != nil {
		return err
	}
	defer cli.Close()
	defer g.Close()
	if err := g.Delete(ctx, kafkaOffsets); err != nil {
		return err
	}
	what := "etcd state under " + g.Root()
	if kafkaOffsets {
		what += " and its Kafka committed offsets"
	}
	fmt.Printf("deleted group %s: %s\n", c.group, what)
	return nil
}

func (c *groupCommand) pause(ctx context.Context, fs *flag.FlagSet, args []string, pause bool) error {
	var reason string
	if pause {
		fs.StringVar(&reason, "reason", "", "why, shown by status")
	}
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	cli, g, _, err := c.open(ctx, false)
	if err != nil {
		return err
	}
	defer cli.Close()
	defer g.Close()
	if pause {
		if err := g.Pause(ctx, operator(), reason); err != nil {
			return err
		}
		fmt.Printf("paused group %s: members finish what is in flight and take no more records until 'keyshare group resume'\n", c.group)
		return nil
	}
	was, err := g.Resume(ctx)
	if err != nil {
		return err
	}
	if !was {
		fmt.Printf("group %s was not paused\n", c.group)
		return nil
	}
	fmt.Printf("resumed group %s\n", c.group)
	return nil
}

// operator names who runs the command, for the pause record.
func operator() string {
	host, _ := os.Hostname()
	user := os.Getenv("USER")
	if user == "" {
		user = "unknown"
	}
	return user + "@" + host
}
