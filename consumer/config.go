package consumer

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"

	"github.com/keyshare/keyshare/coord"
)

// Handler handles one record. It returns nil when the record is done. An
// error (or a panic) is retried per Config.Retry. ctx ends when the member
// must stop working on the record's range (it was revoked past the drain
// timeout, fenced, or the session was lost); the handler should return
// promptly then: the record will run again on the range's next owner.
type Handler func(ctx context.Context, m *kafka.Message) error

// RetryPolicy says how a failing record is retried.
type RetryPolicy struct {
	// MaxAttempts is how many times a record is tried before it goes to the
	// dead-letter topic. With no dead-letter topic the record is retried
	// forever (its key stays blocked; status and logs name it). Default 3.
	MaxAttempts int
	// Backoff is the wait after the first failure; it doubles each time up
	// to MaxBackoff. Defaults 100 ms and 5 s.
	Backoff    time.Duration
	MaxBackoff time.Duration
}

// Config configures a Consumer. Start from DefaultConfig().
type Config struct {
	// Group names the keyshare group: its etcd state lives under
	// Prefix/Group/ and its offsets are committed to Kafka under this group
	// id. Required.
	Group string
	// Topics to consume. Required; each must exist.
	Topics []string
	// CoPartitioned declares sets of Topics that are co-partitioned (the
	// same partition count, their records keyed alike and partitioned by
	// the same partitioner): partition p of each topic of a set gets the
	// ranges and owners of the set's first topic's partition p, so a
	// handler of one topic's record can read the keyed state the others'
	// records wrote for its key (statestore.Store.Lookup: a join). Run
	// refuses a set whose partition counts differ. Give every member the
	// same. Default none.
	CoPartitioned [][]string
	// Kafka is passed to librdkafka for the fetching consumer (and the
	// dead-letter producer); "bootstrap.servers" is required. keyshare sets
	// "group.id" (to Group), "enable.auto.commit" (false),
	// "enable.auto.offset.store" (false), "auto.offset.reset" (error:
	// keyshare decides where to start, see AutoOffsetReset) and
	// "enable.partition.eof" (true: the end of the log moves the ledger
	// past transaction markers), and refuses a conflicting value for any of
	// them. "isolation.level" passes through: read_committed (librdkafka's
	// default) skips aborted transactions, read_uncommitted handles them.
	// keyshare's one default of its own, "fetch.queue.backoff.ms" 50
	// (librdkafka's: 1,000), lets a member that drains librdkafka's queue
	// within a second fetch again sooner; a value given here wins.
	// Everything else keeps librdkafka's defaults ("fetch.wait.max.ms" 500:
	// a range taken over is first fetched when the fetch in flight returns;
	// lower it for quicker handoffs at the price of the broker's CPU).
	Kafka kafka.ConfigMap
	// AutoOffsetReset says where a range starts when the group has no state
	// and no committed offset: OffsetEarliest or OffsetLatest. Default
	// OffsetEarliest.
	AutoOffsetReset OffsetReset
	// RetentionLoss says what a member does when Kafka deleted records its
	// ranges had not handled (retention, DeleteRecords): RetentionLossReport
	// or RetentionLossHalt. Default RetentionLossReport.
	RetentionLoss RetentionLossPolicy
	// Handler handles records one at a time. Set it or BatchHandler, not
	// both.
	Handler Handler
	// BatchHandler handles records in batches of up to MaxBatchSize, of
	// any keys, keeping per-key order; each record has its own result,
	// retries and dead letter (see BatchHandler). Set it or Handler, not
	// both. Default nil.
	BatchHandler BatchHandler
	// MaxBatchSize is the most records one BatchHandler call receives; at
	// most MaxInFlight. Used only with BatchHandler. Default 100.
	MaxBatchSize int
	// MaxBatchWait is how long a batch waits for more records once it has
	// its first, unless it fills up before; 0 hands over what is ready at
	// once. Used only with BatchHandler. Default 10 ms.
	MaxBatchWait time.Duration
	// Concurrency is the number of records handled at once (different keys
	// in parallel; one key at a time); with BatchHandler, the number of
	// batches handled at once. Default 16.
	Concurrency int
	// MaxInFlight bounds the records fetched but not finished; at the bound
	// the member pauses fetching. Default 1000.
	MaxInFlight int
	// MaxInFlightBytes bounds the bytes (keys, values and headers) of the
	// records fetched but not finished, as MaxInFlight bounds their number:
	// at either bound the member takes no more records. A record larger
	// than the bound is still taken, alone. Default 256 MiB: no bound for
	// records up to 256 KiB at the default MaxInFlight, and for larger
	// records (Kafka's default limit is 1 MiB each) room for 256 of them,
	// sixteen per worker at the default Concurrency. librdkafka's own
	// fetch queue (queued.max.messages.kbytes, 64 MiB by default) comes on
	// top.
	MaxInFlightBytes int64
	// MaxQueuedPerKey bounds the records of one blocked key (its head
	// record has not finished for a second: retried, or hanging) kept in
	// memory; beyond it they stay pending in the ledger and are fetched
	// again when the key moves, so one blocked key cannot fill MaxInFlight
	// and stall every other key. 0 means min(100, MaxInFlight/4).
	MaxQueuedPerKey int
	// FlushInterval is how often completed offsets are written to etcd.
	// Default 500 ms. It bounds the records that run twice after a crash.
	FlushInterval time.Duration
	// MaxUnflushed bounds the records completed but not yet recorded in
	// etcd: at half of it the member flushes early, at the bound it stops
	// taking records until a flush lands (so an etcd outage cannot pile
	// up work that a crash would run again). Default 10,000.
	MaxUnflushed int
	// FlushEntryBytes is the size of a range's ledger entry at which the
	// member writes it at once instead of at the next flush interval. An
	// entry grows with its range's pending offsets (records in flight, or
	// inherited and not yet run); etcd refuses a request over its
	// --max-request-bytes (1.5 MiB by default), so an entry must reach
	// etcd while it is still well below that. At most 1 MiB. Default
	// 256 KiB.
	FlushEntryBytes int
	// EtcdTimeout bounds each etcd request of the data path: a ledger
	// flush, and the leader's reads and commit records. A request still
	// unanswered is abandoned and made again on the next round. Without a
	// bound a member would wait as long as etcd holds a request when its
	// own leader fails (etcd's request timeout, 7 s by default) instead of
	// retrying on the new leader. Default 2 s.
	EtcdTimeout time.Duration
	// CommitInterval is how often the leader commits safe offsets to Kafka.
	// Default 1 s.
	CommitInterval time.Duration
	// Retry is the policy for failing records.
	Retry RetryPolicy
	// DeadLetterTopic receives records that failed Retry.MaxAttempts times,
	// with headers keyshare.topic, keyshare.partition, keyshare.offset,
	// keyshare.error and keyshare.attempts; the record's own headers named
	// keyshare.* are renamed original.keyshare.*. A record too large for
	// the topic goes without its value (header keyshare.dropped). The
	// handler is not called again after the last attempt: a write that
	// fails otherwise is retried, and the record holds its partition's
	// commit until it lands. Default "" (none: retry forever).
	DeadLetterTopic string

	// MemberID identifies this member (no '/'). Default hostname-pid-random.
	MemberID string
	// Weight is the member's capacity relative to others. Default 1.
	Weight int
	// Prefix is the etcd prefix of all groups. Default "/keyshare".
	Prefix string
	// Tuning holds the coordination's timing, transaction-size and
	// balance settings: SessionTTL, DeadlineMargin, FailoverGrace,
	// DrainTimeout, RebalanceDebounce, PartitionRefresh, MaxTxnOps,
	// Balance, LoadReportInterval, LoadMinGain, LoadMinBusy and
	// LoadCooldown, each with its default (coord.DefaultTuning). Give every
	// member of a group the same: the leader's count.
	coord.Tuning
	// StartTimeout bounds each attempt of the calls a member retries while
	// Kafka or etcd cannot answer yet (a broker starting, etcd electing a
	// leader); the member retries them for as long as it runs. Default 10 s.
	StartTimeout time.Duration
	// StuckTimeout: a range whose watermark has not moved for this long
	// while later records are done or waiting is reported as stuck (a
	// warning naming the record, a metric, a line in keyshare status).
	// Default 30 s.
	StuckTimeout time.Duration
	// MetricsAddr, if set, is the host:port where Run serves /metrics
	// (Prometheus), /healthz and /readyz. Default "" (none; a service can
	// serve HTTPHandler() itself).
	MetricsAddr string

	// Logger receives the consumer's and librdkafka's logs. Default: none.
	Logger hclog.Logger
	// TracerProvider, if set, traces each handler call with OpenTelemetry:
	// a span whose parent is the W3C trace context in the record's
	// headers, passed to the handler as its ctx (see docs/consumer.md).
	// Default nil: no spans, and no headers read.
	TracerProvider trace.TracerProvider
}

// DefaultConfig returns a Config with every default set; fill in Group,
// Topics, Kafka["bootstrap.servers"] and Handler.
func DefaultConfig() Config {
	cc := coord.DefaultConfig()
	return Config{
		Kafka:            kafka.ConfigMap{},
		AutoOffsetReset:  OffsetEarliest,
		RetentionLoss:    RetentionLossReport,
		MaxBatchSize:     100,
		MaxBatchWait:     10 * time.Millisecond,
		Concurrency:      16,
		MaxInFlight:      1000,
		MaxInFlightBytes: 256 << 20,
		FlushInterval:    500 * time.Millisecond,
		EtcdTimeout:      2 * time.Second,
		MaxUnflushed:     10000,
		FlushEntryBytes:  256 << 10,
		CommitInterval:   time.Second,
		Retry:            RetryPolicy{MaxAttempts: 3, Backoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second},
		Weight:           cc.Weight,
		Prefix:           cc.Prefix,
		Tuning:           cc.Tuning,
		StartTimeout:     cc.StartTimeout,
		StuckTimeout:     30 * time.Second,
	}
}

func configErr(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...)
}

// keysWeSet are librdkafka settings keyshare controls, with the only value a
// caller may also give.
var keysWeSet = map[string]string{
	"enable.auto.commit":       "false",
	"enable.auto.offset.store": "false",
}

// Validate reports the first impossible setting, naming the field and what to
// do. It does not contact Kafka or etcd.
func (c Config) Validate() error {
	if err := coord.CheckName("group (Config.Group)", c.Group); err != nil {
		return configErr("%v", err)
	}
	if len(c.Topics) == 0 {
		return configErr("no topics: set Config.Topics")
	}
	for _, t := range c.Topics {
		if err := coord.CheckName("topic", t); err != nil {
			return configErr("%v", err)
		}
	}
	switch {
	case c.Handler == nil && c.BatchHandler == nil:
		return configErr("Config.Handler is nil: give the function that handles a record (or Config.BatchHandler, for batches)")
	case c.Handler != nil && c.BatchHandler != nil:
		return configErr("Config.Handler and Config.BatchHandler are both set: set one of them")
	}
	if err := c.validateKafka(); err != nil {
		return err
	}
	switch c.AutoOffsetReset {
	case OffsetEarliest, OffsetLatest:
	default:
		return configErr(`AutoOffsetReset %q: want "earliest" or "latest"`, c.AutoOffsetReset)
	}
	switch c.RetentionLoss {
	case RetentionLossReport, RetentionLossHalt:
	default:
		return configErr(`RetentionLoss %q: want "report" or "halt"`, c.RetentionLoss)
	}
	if err := c.validateLimits(); err != nil {
		return err
	}
	if c.DeadLetterTopic != "" {
		if err := coord.CheckName("dead-letter topic", c.DeadLetterTopic); err != nil {
			return configErr("%v", err)
		}
	}
	if err := c.coordConfig(nil).Validate(); err != nil {
		return configErr("%v", err)
	}
	return nil
}

// validateKafka reports the first Kafka setting keyshare cannot run with.
func (c Config) validateKafka() error {
	if v, _ := c.Kafka.Get("bootstrap.servers", ""); v == "" {
		return configErr(`Config.Kafka["bootstrap.servers"] is not set: give the brokers' host:port list`)
	}
	for k, want := range keysWeSet {
		if v, ok := c.Kafka[k]; ok && !strings.EqualFold(fmt.Sprint(v), want) {
			return configErr("Kafka setting %s=%v is not allowed: keyshare commits offsets itself (remove it or set %s)", k, v, want)
		}
	}
	if v, ok := c.Kafka["enable.partition.eof"]; ok && !strings.EqualFold(fmt.Sprint(v), "true") {
		return configErr("Kafka setting enable.partition.eof=%v is not allowed: keyshare needs the end-of-partition events to move past transaction markers and aborted or compacted records at the end of the log (remove it)", v)
	}
	if v, ok := c.Kafka["group.id"]; ok && fmt.Sprint(v) != c.Group {
		return configErr(`Kafka setting group.id=%v differs from Config.Group %q: remove it (keyshare sets it)`, v, c.Group)
	}
	if v, ok := c.Kafka["auto.offset.reset"]; ok {
		return configErr("Kafka setting auto.offset.reset=%v: use Config.AutoOffsetReset instead (keyshare decides where ranges start)", v)
	}
	return nil
}

// validateLimits reports the first bound, interval or retry setting out of
// its range.
func (c Config) validateLimits() error {
	switch {
	case c.Concurrency <= 0:
		return configErr("Concurrency %d must be at least 1 (default 16)", c.Concurrency)
	case c.MaxQueuedPerKey < 0:
		return configErr("MaxQueuedPerKey %d must not be negative (0: min(100, MaxInFlight/4))", c.MaxQueuedPerKey)
	case c.MaxInFlight < c.Concurrency:
		return configErr("MaxInFlight %d must be at least Concurrency %d (default 1000)", c.MaxInFlight, c.Concurrency)
	case c.MaxInFlightBytes <= 0:
		return configErr("MaxInFlightBytes %d must be positive (default 268435456, 256 MiB)", c.MaxInFlightBytes)
	case c.MaxUnflushed < c.Concurrency:
		return configErr("MaxUnflushed %d must be at least Concurrency %d (default 10000)", c.MaxUnflushed, c.Concurrency)
	case c.FlushEntryBytes < 1<<10 || c.FlushEntryBytes > 1<<20:
		return configErr("FlushEntryBytes %d must be between 1 KiB and 1 MiB, below etcd's request limit (default 262144, 256 KiB)", c.FlushEntryBytes)
	case c.BatchHandler != nil && c.MaxBatchSize <= 0:
		return configErr("MaxBatchSize %d must be at least 1 with a BatchHandler (default 100)", c.MaxBatchSize)
	case c.BatchHandler != nil && c.MaxBatchSize > c.MaxInFlight:
		return configErr("MaxBatchSize %d exceeds MaxInFlight %d: a batch could never fill; lower MaxBatchSize or raise MaxInFlight", c.MaxBatchSize, c.MaxInFlight)
	case c.BatchHandler != nil && c.MaxBatchWait < 0:
		return configErr("MaxBatchWait %s must not be negative (default 10ms; 0 hands over what is ready at once)", c.MaxBatchWait)
	case c.FlushInterval <= 0:
		return configErr("FlushInterval %s must be positive (default 500ms)", c.FlushInterval)
	case c.EtcdTimeout <= 0:
		return configErr("EtcdTimeout %s must be positive (default 2s)", c.EtcdTimeout)
	case c.CommitInterval <= 0:
		return configErr("CommitInterval %s must be positive (default 1s)", c.CommitInterval)
	case c.StuckTimeout <= 0:
		return configErr("StuckTimeout %s must be positive (default 30s)", c.StuckTimeout)
	case c.Retry.MaxAttempts <= 0:
		return configErr("Retry.MaxAttempts %d must be at least 1 (default 3)", c.Retry.MaxAttempts)
	case c.Retry.Backoff < 0 || c.Retry.MaxBackoff < c.Retry.Backoff:
		return configErr("Retry.Backoff %s and MaxBackoff %s: want 0 <= Backoff <= MaxBackoff", c.Retry.Backoff, c.Retry.MaxBackoff)
	}
	return nil
}

// coordConfig is the coordination config derived from c.
func (c Config) coordConfig(src coord.PartitionSource) coord.Config {
	cc := coord.DefaultConfig()
	cc.Group, cc.Prefix, cc.MemberID, cc.Weight = c.Group, c.Prefix, c.MemberID, c.Weight
	cc.Topics, cc.CoPartitioned = c.Topics, c.CoPartitioned
	cc.Partitions = src
	if src == nil {
		cc.Partitions = func(context.Context, []string) (map[string]int32, error) { return nil, nil }
	}
	cc.Tuning, cc.StartTimeout = c.Tuning, c.StartTimeout
	cc.Logger = c.Logger
	return cc
}
