package coord

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/schema"
)

// PartitionSource returns the partition count of each topic. The leader calls
// it to learn the partitions to assign (the consumer package reads them from
// Kafka). A topic it cannot count (unknown, or not authorised) is left out of
// the map: the leader reports it and assigns the other topics, leaving the
// missing topic's ranges as they are. An error means no count could be read.
type PartitionSource func(ctx context.Context, topics []string) (map[string]int32, error)

// TopicIDSource tells the leader which incarnation of each topic Kafka holds,
// so that it can tell a topic deleted and created again under the same name
// and start that topic afresh, with no ledger or commit state of the old
// one. The consumer package implements it with Kafka's admin API.
type TopicIDSource interface {
	// IDs returns each topic's id (Kafka's topic UUID), leaving out the
	// topics it cannot read.
	IDs(ctx context.Context, topics []string) (map[string]string, error)
	// ResetOffsets sets the group's committed Kafka offsets of topic to
	// where a new group would start (auto.offset.reset), and deletes
	// those of partitions the topic no longer has.
	ResetOffsets(ctx context.Context, topic string) error
	// HasOffsets reports whether Kafka holds a committed offset of the
	// group for any partition of topic. A broker drops a deleted topic's
	// offsets, so a topic the group committed to that has none now was
	// deleted since: Kafka's own word that a topic was recreated.
	HasOffsets(ctx context.Context, topic string) (bool, error)
}

// Config configures a member's coordination.
type Config struct {
	// Group names the group; its state lives under Prefix/Group/. Required.
	Group string
	// Prefix is the etcd prefix of all groups. Default "/keyshare".
	Prefix string
	// MemberID identifies this member; it must be unique among live members
	// and contain no '/'. Default: hostname-pid-random.
	MemberID string
	// Weight is the member's capacity relative to the others: a member of
	// weight 2 gets twice the hash space of one of weight 1. From 1 to
	// MaxWeight (1,000,000). Default 1.
	Weight int
	// Topics the group consumes. Required.
	Topics []string
	// Partitions tells the leader the topics' partition counts. Required.
	Partitions PartitionSource
	// CoPartitioned declares sets of Topics whose partition p the leader
	// lays out as the set's first topic's partition p: the same ranges,
	// the same owners (assign.CoPartition). Give every member the same.
	CoPartitioned [][]string
	// TopicIDs, if set, lets the leader tell a topic that was deleted and
	// created again: it then starts the topic afresh instead of applying
	// the old topic's ledger to the new log. Default: none (not checked).
	TopicIDs TopicIDSource
	// Tuning holds the timing, transaction-size and balance settings
	// (SessionTTL, DrainTimeout, MaxTxnOps, Balance, ...), with their
	// defaults.
	Tuning
	// StartTimeout bounds the first contact with etcd when joining.
	// Default 10 s.
	StartTimeout time.Duration
	// Offsets, if set, is the group's offsets in Kafka: while this member
	// leads, it commits the safe offsets there every CommitInterval
	// (default 1 s) and gives each round's result to
	// OnCommitRound, if set (the consumer's metrics).
	Offsets        Offsets
	CommitInterval time.Duration
	OnCommitRound  func(CommitRound)
	// Logger receives coordination logs. Default: none.
	Logger hclog.Logger
}

// DefaultConfig returns a Config with every default filled in except Group,
// Topics and Partitions.
func DefaultConfig() Config {
	return Config{
		Prefix:         schema.DefaultPrefix,
		Weight:         1,
		Tuning:         DefaultTuning(),
		StartTimeout:   10 * time.Second,
		CommitInterval: time.Second,
	}
}

// withDefaults fills the fields whose zero value means "choose for me".
func (c Config) withDefaults() Config {
	if c.MemberID == "" {
		c.MemberID = DefaultMemberID()
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	c.Tuning = c.Tuning.withDefaults()
	return c
}

// Validate reports the first impossible setting, naming the field and what to
// do. Start from DefaultConfig(); only MemberID and Logger may be left zero.
func (c Config) Validate() error {
	if err := schema.CheckName("group name (Config.Group)", c.Group); err != nil {
		return fmt.Errorf("coord: %w", err)
	}
	if c.MemberID != "" {
		if err := schema.CheckName("member id (Config.MemberID)", c.MemberID); err != nil {
			return fmt.Errorf("coord: %w", err)
		}
	}
	if len(c.Topics) == 0 {
		return errors.New("coord: no topics: set Config.Topics to at least one topic")
	}
	for _, t := range c.Topics {
		if err := schema.CheckName("topic", t); err != nil {
			return fmt.Errorf("coord: %w", err)
		}
	}
	if c.Partitions == nil {
		return errors.New("coord: Config.Partitions is nil: the leader needs a way to read partition counts")
	}
	if err := checkCoPartitioned(c.CoPartitioned, c.Topics); err != nil {
		return err
	}
	if !strings.HasPrefix(c.Prefix, "/") {
		return fmt.Errorf("coord: prefix %q must start with '/' (Config.Prefix, default /keyshare)", c.Prefix)
	}
	switch {
	case c.Weight <= 0:
		return fmt.Errorf("coord: weight %d must be at least 1 (Config.Weight, default 1)", c.Weight)
	case c.Weight > assign.MaxWeight:
		return fmt.Errorf("coord: weight %d is above the limit %d (Config.Weight, default 1): weights are relative, scale them down", c.Weight, assign.MaxWeight)
	case c.StartTimeout <= 0:
		return fmt.Errorf("coord: start timeout %s must be positive (Config.StartTimeout, default 10s)", c.StartTimeout)
	case c.Offsets != nil && c.CommitInterval <= 0:
		return fmt.Errorf("coord: commit interval %s must be positive (Config.CommitInterval, default 1s)", c.CommitInterval)
	}
	return c.Tuning.Validate()
}

// DefaultMemberID returns hostname-pid-random, unique enough for members
// that do not set an id.
func DefaultMemberID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%04x", host, os.Getpid(), time.Now().UnixNano()&0xffff)
}

// checkCoPartitioned refuses a set of co-partitioned topics that is not
// two or more of topics, or a topic in two sets.
func checkCoPartitioned(sets [][]string, topics []string) error {
	in := make(map[string]int)
	for i, set := range sets {
		if len(set) < 2 {
			return fmt.Errorf("coord: co-partitioned set %d %q: want two topics or more", i+1, set)
		}
		for _, t := range set {
			if !slices.Contains(topics, t) {
				return fmt.Errorf("coord: co-partitioned topic %q is not one of the group's topics %q (Config.Topics)", t, topics)
			}
			if j, ok := in[t]; ok {
				return fmt.Errorf("coord: topic %q is in co-partitioned sets %d and %d: a topic is in one set at most", t, j, i+1)
			}
			in[t] = i + 1
		}
	}
	return nil
}
