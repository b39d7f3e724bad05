package coord

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/internal/keys"
)

// Errors a caller can branch on.
var (
	// ErrMemberExists: another live member registered the same id.
	ErrMemberExists = errors.New("coord: member id already registered by a live member")
	// ErrNotLeader: a leader write was refused because the writer is no
	// longer the leader.
	ErrNotLeader = errors.New("coord: not leader")
	// ErrSessionLost: the member's etcd session ended; everything it owned
	// must stop.
	ErrSessionLost = errors.New("coord: session lost")
)

// PartitionSource returns the partition count of each topic. The leader calls
// it to learn the partitions to assign (the consumer package reads them from
// Kafka). A topic it cannot count (unknown, or not authorised) is left out of
// the map: the leader reports it and assigns the other topics, leaving the
// missing topic's ranges as they are. An error means no count could be read.
type PartitionSource func(ctx context.Context, topics []string) (map[string]int32, error)

// TopicIDSource tells the leader which incarnation of each topic Kafka holds,
// so that it can tell a topic deleted and created again under the same name
// (see Session's topic checks in topics.go). The consumer package implements
// it with Kafka's admin API.
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
	// TopicIDs, if set, lets the leader tell a topic that was deleted and
	// created again: it then starts the topic afresh instead of applying
	// the old topic's ledger to the new log. Default: none (not checked).
	TopicIDs TopicIDSource
	// SessionTTL is the etcd lease TTL: a member that stops answering loses
	// its ranges this long after. Default 10 s; etcd may grant more.
	SessionTTL time.Duration
	// DeadlineMargin: a member stops starting records (and ends its
	// session) this long before the earliest instant etcd could expire its
	// lease, counted from when it sent the last keepalive etcd answered
	// (deadline.go). It covers clock-rate differences between the member
	// and etcd. Default SessionTTL/10 (zero means that); at most
	// SessionTTL/2.
	DeadlineMargin time.Duration
	// FailoverGrace: the leader gives a crashed or cut-off member's ranges
	// to others only this long after it first saw the member's session
	// gone, on its own clock (grace.go), so that records the old owner
	// started before its deadline can end first. Default 1 s; 0 turns it
	// off.
	FailoverGrace time.Duration
	// DrainTimeout bounds how long an owner may drain a revoked range (the
	// leader writes it into the record as drain_ms). The leader hands the
	// range over anyway once DrainTimeout plus max(1s, SessionTTL) has
	// passed on its own clock since it first saw the revoke. Default 30 s.
	DrainTimeout time.Duration
	// RebalanceDebounce is how long the leader waits after a member joins
	// or its registration goes before reassigning, to batch bursts of
	// joins. Releases and a member starting to leave are not waited for.
	// Default 200 ms.
	RebalanceDebounce time.Duration
	// PartitionRefresh is how often the leader rereads partition counts
	// and topic ids from Kafka (in the background: rounds plan on the
	// last read).
	// Default 10 s.
	PartitionRefresh time.Duration
	// StartTimeout bounds the first contact with etcd when joining.
	// Default 10 s.
	StartTimeout time.Duration
	// MaxTxnOps is the etcd server's --max-txn-ops. Default 128.
	MaxTxnOps int
	// Balance is what the leader balances when members share partitions:
	// BalanceLoad (measured load, from the members' reports) or
	// BalanceWidth (hash space by weight). Default BalanceLoad.
	Balance Balance
	// LoadReportInterval is how often the member reports the load of its
	// ranges (ReportLoad); the leader places split points by these
	// reports. Default 5 s.
	LoadReportInterval time.Duration
	// LoadMinGain is the least gain for which the leader moves ranges by
	// load: the busiest member's load now divided by its load predicted
	// after the move must be at least this. Hysteresis: below it, measured
	// noise would move ranges back and forth. Default 1.25; from 1.05 to
	// 100.
	LoadMinGain float64
	// LoadMinBusy is the least load of the busiest member (busy
	// worker-seconds per second, per mean member weight) for which the
	// leader moves ranges by load: below it every member is idle most of
	// the time, nothing waits on the busiest, and a move would only pause
	// the keys it hands over. Default 0.5 (half a worker busy all the
	// time); 0 moves on any imbalance.
	LoadMinBusy float64
	// LoadCooldown is the least time between two load-driven moves, on the
	// leader's clock. Default 30 s; at least LoadReportInterval.
	LoadCooldown time.Duration
	// OnLeader, if set, runs in its own goroutine while this member is the
	// leader; its context ends when leadership does. The consumer uses it
	// to commit safe offsets to Kafka.
	OnLeader func(ctx context.Context, l *Leader)
	// Logger receives coordination logs. Default: none.
	Logger hclog.Logger
}

// DefaultConfig returns a Config with every default filled in except Group,
// Topics and Partitions.
func DefaultConfig() Config {
	return Config{
		Prefix:             "/keyshare",
		Weight:             1,
		SessionTTL:         10 * time.Second,
		DrainTimeout:       30 * time.Second,
		FailoverGrace:      time.Second,
		RebalanceDebounce:  200 * time.Millisecond,
		PartitionRefresh:   10 * time.Second,
		StartTimeout:       10 * time.Second,
		MaxTxnOps:          128,
		Balance:            BalanceLoad,
		LoadReportInterval: 5 * time.Second,
		LoadMinGain:        1.25,
		LoadMinBusy:        0.5,
		LoadCooldown:       30 * time.Second,
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
	if c.DeadlineMargin == 0 {
		c.DeadlineMargin = c.SessionTTL / 10
	}
	return c
}

// Validate reports the first impossible setting, naming the field and what to
// do. Start from DefaultConfig(); only MemberID and Logger may be left zero.
func (c Config) Validate() error {
	if err := keys.CheckName("group name (Config.Group)", c.Group); err != nil {
		return fmt.Errorf("coord: %w", err)
	}
	if c.MemberID != "" {
		if err := keys.CheckName("member id (Config.MemberID)", c.MemberID); err != nil {
			return fmt.Errorf("coord: %w", err)
		}
	}
	if len(c.Topics) == 0 {
		return errors.New("coord: no topics: set Config.Topics to at least one topic")
	}
	for _, t := range c.Topics {
		if err := keys.CheckName("topic", t); err != nil {
			return fmt.Errorf("coord: %w", err)
		}
	}
	if c.Partitions == nil {
		return errors.New("coord: Config.Partitions is nil: the leader needs a way to read partition counts")
	}
	if !strings.HasPrefix(c.Prefix, "/") {
		return fmt.Errorf("coord: prefix %q must start with '/' (Config.Prefix, default /keyshare)", c.Prefix)
	}
	switch {
	case c.Weight <= 0:
		return fmt.Errorf("coord: weight %d must be at least 1 (Config.Weight, default 1)", c.Weight)
	case c.Weight > MaxWeight:
		return fmt.Errorf("coord: weight %d is above the limit %d (Config.Weight, default 1): weights are relative, scale them down", c.Weight, MaxWeight)
	case c.SessionTTL < time.Second:
		return fmt.Errorf("coord: session TTL %s must be at least 1s (Config.SessionTTL, default 10s)", c.SessionTTL)
	case c.DeadlineMargin < 0 || c.DeadlineMargin > c.SessionTTL/2:
		return fmt.Errorf("coord: deadline margin %s must be between 0 and half the session TTL %s (Config.DeadlineMargin, default SessionTTL/10)", c.DeadlineMargin, c.SessionTTL)
	case c.FailoverGrace < 0:
		return fmt.Errorf("coord: failover grace %s must not be negative (Config.FailoverGrace, default 1s, 0 turns it off)", c.FailoverGrace)
	case c.DrainTimeout <= 0 || c.DrainTimeout > maxDrain:
		return fmt.Errorf("coord: drain timeout %s must be positive and at most %s (Config.DrainTimeout, default 30s)", c.DrainTimeout, maxDrain)
	case c.RebalanceDebounce < 0:
		return fmt.Errorf("coord: rebalance debounce %s must not be negative (Config.RebalanceDebounce, default 200ms)", c.RebalanceDebounce)
	case c.PartitionRefresh <= 0:
		return fmt.Errorf("coord: partition refresh %s must be positive (Config.PartitionRefresh, default 10s)", c.PartitionRefresh)
	case c.StartTimeout <= 0:
		return fmt.Errorf("coord: start timeout %s must be positive (Config.StartTimeout, default 10s)", c.StartTimeout)
	case c.MaxTxnOps < 8:
		return fmt.Errorf("coord: MaxTxnOps %d: set it to the etcd server's --max-txn-ops (default 128, at least 8)", c.MaxTxnOps)
	case c.Balance != BalanceLoad && c.Balance != BalanceWidth:
		return fmt.Errorf("coord: balance %q: want %q or %q (Config.Balance, default %q)", c.Balance, BalanceLoad, BalanceWidth, BalanceLoad)
	case c.LoadReportInterval < 100*time.Millisecond:
		return fmt.Errorf("coord: load report interval %s must be at least 100ms (Config.LoadReportInterval, default 5s)", c.LoadReportInterval)
	case !(c.LoadMinGain >= 1.05 && c.LoadMinGain <= 100):
		return fmt.Errorf("coord: load minimum gain %v must be from 1.05 to 100 (Config.LoadMinGain, default 1.25): below 1.05 measurement noise would move ranges back and forth", c.LoadMinGain)
	case !(c.LoadMinBusy >= 0 && c.LoadMinBusy <= 1e6):
		return fmt.Errorf("coord: load minimum busy %v must be from 0 to 1e6 busy worker-seconds per second (Config.LoadMinBusy, default 0.5)", c.LoadMinBusy)
	case c.LoadCooldown < c.LoadReportInterval:
		return fmt.Errorf("coord: load cooldown %s must be at least the load report interval %s (Config.LoadCooldown, default 30s): the leader needs a report of the new ranges before it judges them", c.LoadCooldown, c.LoadReportInterval)
	}
	return nil
}

// DefaultMemberID returns hostname-pid-random, unique enough for members
// that do not set an id.
func DefaultMemberID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%04x", host, os.Getpid(), time.Now().UnixNano()&0xffff)
}
