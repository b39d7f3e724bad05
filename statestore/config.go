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
	// Dir, when set, keeps the ranges' states on this member's disk, in
	// a Pebble store in Dir, instead of in memory: for state larger than
	// memory. A range the member gives up stays there as a copy for
	// CopyMaxAge, and when the member takes the range again (or a part of
	// it, or after a restart) it restores from the copy and the
	// changelog's tail instead of the whole changelog partition. Each
	// member needs a Dir of its own; a Dir holds one group's state.
	Dir string
	// Table bounds the state of one range: the bytes its keys, values
	// and keystate.EntryOverhead count. A change or a restore past it is
	// an error, never a drop. Default 256 MiB in memory, DefaultDiskMaxBytes
	// with Dir.
	Table keystate.Config
	// DiskCacheBytes is the memory the disk store caches its blocks in
	// (Pebble's block cache); beside it, Pebble's memtables take up to
	// 32 MiB. Default 64 MiB. Only with Dir.
	DiskCacheBytes int64
	// CopyMaxAge is how long a copy of a range stays usable: it must be
	// below the changelog's delete.retention.ms (Kafka's default is 24
	// hours), or a tombstone compaction removed after the copy was read
	// could leave a deleted key's state alive in it. Default 1 hour. Only
	// with Dir.
	CopyMaxAge time.Duration
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

// Defaults of Config's settings.
const (
	DefaultMinCompactionLag = time.Hour
	DefaultDiskMaxBytes     = 16 << 30 // Table.MaxBytes with Dir
	DefaultDiskCacheBytes   = 64 << 20
	DefaultCopyMaxAge       = time.Hour
)

func (c Config) withDefaults() Config {
	if c.Changelog == nil {
		c.Changelog = DefaultChangelog
	}
	if c.Table == (keystate.Config{}) {
		c.Table = keystate.DefaultConfig()
		if c.Dir != "" {
			c.Table.MaxBytes = DefaultDiskMaxBytes
		}
	}
	if c.DiskCacheBytes == 0 {
		c.DiskCacheBytes = DefaultDiskCacheBytes
	}
	if c.CopyMaxAge == 0 {
		c.CopyMaxAge = DefaultCopyMaxAge
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
	case c.DiskCacheBytes < 0:
		return fmt.Errorf("statestore: DiskCacheBytes %d is negative: give the memory the disk store may cache in, or 0 for %d", c.DiskCacheBytes, DefaultDiskCacheBytes)
	case c.CopyMaxAge < 0:
		return fmt.Errorf("statestore: CopyMaxAge %s is negative: give how long a range's copy stays usable, below the changelog's delete.retention.ms, or 0 for %s", c.CopyMaxAge, DefaultCopyMaxAge)
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
