package coord

import (
	"fmt"
	"time"
)

// Tuning is the coordination's timing, transaction-size and balance settings.
// Config and consumer.Config both embed it, so each setting has one name,
// one default and one check. The leader's settings (FailoverGrace,
// RebalanceDebounce, PartitionRefresh, Balance, LoadMinGain, LoadMinBusy,
// LoadCooldown, and the DrainTimeout it writes into revokes) count only on
// the member that leads, which may be any: give every member of a group the
// same Tuning.
type Tuning struct {
	// SessionTTL is the etcd lease TTL: a member that stops answering loses
	// its ranges this long after. At least 1 s. Default 10 s; etcd may
	// grant more.
	SessionTTL time.Duration
	// DeadlineMargin: a member stops starting records (and ends its
	// session) this long before the earliest instant etcd could expire its
	// lease, counted from when it sent the last keepalive etcd answered.
	// It covers clock-rate differences between the member
	// and etcd. Default SessionTTL/10 (zero means that); at most
	// SessionTTL/2.
	DeadlineMargin time.Duration
	// FailoverGrace: the leader gives a crashed or cut-off member's ranges
	// to others only this long after it first saw the member's session
	// gone, on its own clock, so that records the old owner
	// started before its deadline can end first. Default 1 s; 0 turns it
	// off.
	FailoverGrace time.Duration
	// DrainTimeout bounds how long an owner may drain a revoked range: the
	// leader writes its own into the record (drain_ms); the owner drains
	// for that long from when it sees the revoke, on its own clock, and
	// uses its DrainTimeout only for a record without one. The leader
	// hands the range over anyway once DrainTimeout plus max(1s,
	// SessionTTL) has passed on its own clock since it first saw the
	// revoke. At most 1 h. Default 30 s.
	DrainTimeout time.Duration
	// RebalanceDebounce is how long the leader waits after a member joins
	// or its registration goes before reassigning, to batch bursts of
	// joins. Releases and a member starting to leave are not waited for.
	// Default 200 ms.
	RebalanceDebounce time.Duration
	// PartitionRefresh is how often the leader rereads partition counts
	// and topic ids from Kafka (in the background: rounds plan on the
	// last read). Default 10 s.
	PartitionRefresh time.Duration
	// MaxTxnOps is the etcd server's --max-txn-ops: the most operations
	// (and compares) keyshare puts in one transaction. Set it to the
	// server's value when that is not etcd's default. At least 8. Default
	// 128 (DefaultMaxTxnOps).
	MaxTxnOps int
	// Balance is what the leader balances when members share partitions:
	// BalanceLoad places split points by the load the members report,
	// BalanceWidth gives each member hash space by weight, ignoring load.
	// Default BalanceLoad.
	Balance Balance
	// LoadReportInterval is how often the member reports the load of its
	// ranges (ReportLoad, one small put to load/<member-id>), whatever
	// Balance is; the leader places split points by these reports. At
	// least 100 ms. Default 5 s.
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
}

// DefaultTuning returns the Tuning every default is taken from.
func DefaultTuning() Tuning {
	return Tuning{
		SessionTTL:         10 * time.Second,
		FailoverGrace:      time.Second,
		DrainTimeout:       30 * time.Second,
		RebalanceDebounce:  200 * time.Millisecond,
		PartitionRefresh:   10 * time.Second,
		MaxTxnOps:          DefaultMaxTxnOps,
		Balance:            BalanceLoad,
		LoadReportInterval: 5 * time.Second,
		LoadMinGain:        1.25,
		LoadMinBusy:        0.5,
		LoadCooldown:       30 * time.Second,
	}
}

// withDefaults fills the fields whose zero value means "choose for me".
func (t Tuning) withDefaults() Tuning {
	if t.DeadlineMargin == 0 {
		t.DeadlineMargin = t.SessionTTL / 10
	}
	return t
}

// Validate reports the first impossible setting, naming the field, its
// default and what to do. Start from DefaultTuning(); only DeadlineMargin
// may be left zero.
func (t Tuning) Validate() error {
	switch {
	case t.SessionTTL < time.Second:
		return fmt.Errorf("coord: session TTL %s must be at least 1s (Config.SessionTTL, default 10s)", t.SessionTTL)
	case t.DeadlineMargin < 0 || t.DeadlineMargin > t.SessionTTL/2:
		return fmt.Errorf("coord: deadline margin %s must be between 0 and half the session TTL %s (Config.DeadlineMargin, default SessionTTL/10)", t.DeadlineMargin, t.SessionTTL)
	case t.FailoverGrace < 0:
		return fmt.Errorf("coord: failover grace %s must not be negative (Config.FailoverGrace, default 1s, 0 turns it off)", t.FailoverGrace)
	case t.DrainTimeout <= 0 || t.DrainTimeout > maxDrain:
		return fmt.Errorf("coord: drain timeout %s must be positive and at most %s (Config.DrainTimeout, default 30s)", t.DrainTimeout, maxDrain)
	case t.RebalanceDebounce < 0:
		return fmt.Errorf("coord: rebalance debounce %s must not be negative (Config.RebalanceDebounce, default 200ms)", t.RebalanceDebounce)
	case t.PartitionRefresh <= 0:
		return fmt.Errorf("coord: partition refresh %s must be positive (Config.PartitionRefresh, default 10s)", t.PartitionRefresh)
	case t.MaxTxnOps < 8:
		return fmt.Errorf("coord: max txn ops %d must be at least 8: set it to the etcd server's --max-txn-ops (Config.MaxTxnOps, default %d)", t.MaxTxnOps, DefaultMaxTxnOps)
	case t.Balance != BalanceLoad && t.Balance != BalanceWidth:
		return fmt.Errorf("coord: balance %q: want %q or %q (Config.Balance, default %q)", t.Balance, BalanceLoad, BalanceWidth, BalanceLoad)
	case t.LoadReportInterval < 100*time.Millisecond:
		return fmt.Errorf("coord: load report interval %s must be at least 100ms (Config.LoadReportInterval, default 5s)", t.LoadReportInterval)
	case !(t.LoadMinGain >= 1.05 && t.LoadMinGain <= 100):
		return fmt.Errorf("coord: load minimum gain %v must be from 1.05 to 100 (Config.LoadMinGain, default 1.25): below 1.05 measurement noise would move ranges back and forth", t.LoadMinGain)
	case !(t.LoadMinBusy >= 0 && t.LoadMinBusy <= 1e6):
		return fmt.Errorf("coord: load minimum busy %v must be from 0 to 1e6 busy worker-seconds per second (Config.LoadMinBusy, default 0.5)", t.LoadMinBusy)
	case t.LoadCooldown < t.LoadReportInterval:
		return fmt.Errorf("coord: load cooldown %s must be at least the load report interval %s (Config.LoadCooldown, default 30s): the leader needs a report of the new ranges before it judges them", t.LoadCooldown, t.LoadReportInterval)
	}
	return nil
}
