package statestore

import (
	"fmt"
	"slices"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/keystate"
)

// Config configures a Store.
type Config struct {
	// Group is the keyshare group whose handler keeps the state; it names
	// the default changelog topics. Required.
	Group string
	// Topics are the topics the group consumes (consumer.Config.Topics).
	// Each gets a changelog; a changelog that is one of them is refused.
	// Required.
	Topics []string
	// Changelog names topic's changelog. Default DefaultChangelog.
	Changelog func(group, topic string) string
	// Kafka holds the connection and security settings for the
	// changelog's producer and reader: give consumer.Config.Kafka. The
	// consumer-only settings in it are left out (consumer.ProducerConfig).
	Kafka kafka.ConfigMap
	// Table bounds the state a range keeps in memory. Default
	// keystate.DefaultConfig(): 256 MiB per range.
	Table keystate.Config
	// MinCompactionLag is the changelog's min.compaction.lag.ms when this
	// package creates it: how long a key's superseded record stays
	// readable. It must exceed the time a member that lost a range can
	// still append to it (its drain budget plus the producer's delivery
	// timeout); docs/state.md says why. Default 1 hour.
	MinCompactionLag time.Duration
	// ReplicationFactor of a changelog this package creates; 0 leaves it
	// to the broker's default.replication.factor.
	ReplicationFactor int
	// Logger gets restores and refusals. Default hclog's null logger.
	Logger hclog.Logger
}

// DefaultChangelog is the default changelog of topic in group:
// "<group>-<topic>-state".
func DefaultChangelog(group, topic string) string { return group + "-" + topic + "-state" }

// DefaultMinCompactionLag is Config.MinCompactionLag's default.
const DefaultMinCompactionLag = time.Hour

func (c Config) withDefaults() Config {
	if c.Changelog == nil {
		c.Changelog = DefaultChangelog
	}
	if c.Table == (keystate.Config{}) {
		c.Table = keystate.DefaultConfig()
	}
	if c.MinCompactionLag == 0 {
		c.MinCompactionLag = DefaultMinCompactionLag
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

// validate reports a setting that cannot work, naming it.
func (c Config) validate() error {
	switch {
	case c.Group == "":
		return fmt.Errorf("statestore: Group is empty: give the keyshare group's name (consumer.Config.Group)")
	case len(c.Topics) == 0:
		return fmt.Errorf("statestore: Topics is empty: give the topics the group consumes (consumer.Config.Topics)")
	case c.Kafka["bootstrap.servers"] == nil:
		return fmt.Errorf("statestore: Kafka has no bootstrap.servers: give the consumer's Kafka settings (consumer.Config.Kafka)")
	case c.MinCompactionLag < 0:
		return fmt.Errorf("statestore: MinCompactionLag %s is negative", c.MinCompactionLag)
	case c.ReplicationFactor < 0:
		return fmt.Errorf("statestore: ReplicationFactor %d is negative: give 0 for the broker's default", c.ReplicationFactor)
	}
	if err := c.Table.Validate(); err != nil {
		return err
	}
	for _, t := range c.Topics {
		cl := c.Changelog(c.Group, t)
		if cl == "" {
			return fmt.Errorf("statestore: the changelog name of topic %q is empty", t)
		}
		if slices.Contains(c.Topics, cl) {
			return fmt.Errorf("statestore: the changelog of topic %q is %q, which the group consumes: a changelog holds state, not input; name it apart (Config.Changelog)", t, cl)
		}
	}
	return nil
}
