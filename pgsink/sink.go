package pgsink

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync/atomic"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/keyshare/keyshare/consumer"
)

// DB begins transactions: a *pgxpool.Pool, or a *pgx.Conn used by one
// goroutine at a time.
type DB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Effect applies one record's effect in the sink's transaction tx. It must
// write only through tx: whatever it does elsewhere is not undone when the
// transaction is refused or fails, nor kept from running twice.
type Effect func(ctx context.Context, tx pgx.Tx) error

// Config configures a Sink.
type Config struct {
	// Prefix starts the names of the sink's tables (<prefix>applied and
	// <prefix>fences): lower-case letters, digits and underscores, starting
	// with a letter or underscore. Default "keyshare_".
	Prefix string
}

var prefixRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,40}$`)

// Sink applies records through PostgreSQL transactions. It is safe for
// concurrent use by as many goroutines as db allows.
type Sink struct {
	db              DB
	prefix          string
	applied, fences string // table names

	// unfenced turns the fence check off, for the tests that show what it
	// prevents (export_test.go).
	unfenced bool

	stats struct{ applied, duplicates, fenced atomic.Int64 }
}

// New returns a Sink writing through db. Its tables must exist
// (CreateSchema).
func New(db DB, cfg Config) (*Sink, error) {
	if db == nil {
		return nil, errors.New("pgsink: New needs a database (a *pgxpool.Pool or *pgx.Conn)")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "keyshare_"
	}
	if !prefixRE.MatchString(cfg.Prefix) {
		return nil, fmt.Errorf("pgsink: Config.Prefix %q: use lower-case letters, digits and underscores, starting with a letter or underscore, at most 41 characters", cfg.Prefix)
	}
	return &Sink{db: db, prefix: cfg.Prefix, applied: cfg.Prefix + "applied", fences: cfg.Prefix + "fences"}, nil
}

// Stats counts what the sink did since New: records whose effect was
// applied, records skipped as applied before, and writes refused for a
// stale fence.
type Stats struct {
	Applied, Duplicates, Fenced int64
}

// Stats returns the counts so far.
func (s *Sink) Stats() Stats {
	return Stats{Applied: s.stats.applied.Load(), Duplicates: s.stats.duplicates.Load(), Fenced: s.stats.fenced.Load()}
}

// txOptions: read committed is enough; the fence check is serialized by an
// advisory lock (fence.go), a duplicate by the applied table's key.
var txOptions = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

// Handler returns a consumer.Handler that applies each record through the
// sink: effect runs in the record's transaction, once, under the record's
// fence. A record applied before succeeds without running effect; a
// stale fence fails with a *FencedError (consumer.ErrFenced), which the
// consumer retries while the member works on the record and never
// dead-letters.
func (s *Sink) Handler(effect func(ctx context.Context, tx pgx.Tx, m *kafka.Message) error) consumer.Handler {
	return func(ctx context.Context, m *kafka.Message) error {
		f, ok := consumer.FenceOf(ctx, m)
		if !ok {
			return errors.New("pgsink: the record has no fence: call the sink's Handler from keyshare's consumer, with the context it gives")
		}
		_, err := s.Apply(ctx, f, int64(m.TopicPartition.Offset), func(ctx context.Context, tx pgx.Tx) error {
			return effect(ctx, tx, m)
		})
		return err
	}
}

// Apply applies the record at offset of f's topic and partition, handled
// under fence f (consumer.FenceOf), in one transaction: it checks and
// advances the fence, records the offset as applied and runs effect. It
// reports whether effect ran: false, with a nil error, when the record was
// applied before. A stale fence returns a *FencedError; an error of
// effect's or of the database is returned as is, and nothing of the
// transaction is kept.
func (s *Sink) Apply(ctx context.Context, f consumer.Fence, offset int64, effect Effect) (bool, error) {
	if err := checkWrite(f, offset); err != nil {
		return false, err
	}
	applied, err := s.apply(ctx, f, offset, effect, false)
	if errors.Is(err, errAdvance) {
		applied, err = s.apply(ctx, f, offset, effect, true)
	}
	var fe *FencedError
	switch {
	case errors.As(err, &fe):
		s.stats.fenced.Add(1)
	case err != nil:
	case applied:
		s.stats.applied.Add(1)
	default:
		s.stats.duplicates.Add(1)
	}
	return applied, err
}

// apply is one attempt of Apply's transaction: taking the partition's
// fence lock shared, unless advance (exclusive, to write a newer token).
func (s *Sink) apply(ctx context.Context, f consumer.Fence, offset int64, effect Effect, advance bool) (bool, error) {
	tx, err := s.db.BeginTx(ctx, txOptions)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // a no-op once committed
	b := &pgx.Batch{}
	var fc fenceCheck
	if !s.unfenced {
		queueLock(b, f.Topic, f.Partition, advance)
		s.queueCheck(b, f, advance, &fc)
	}
	var fresh bool
	b.Queue("INSERT INTO "+s.applied+" (topic, kafka_partition, kafka_offset, token) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
		f.Topic, f.Partition, offset, f.Token).Exec(func(ct pgconn.CommandTag) error {
		fresh = ct.RowsAffected() == 1
		return nil
	})
	// One round trip for the lock, the fence and the applied row; on a
	// stale fence the transaction is rolled back, applied row and all.
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return false, err
	}
	if !s.unfenced {
		if err := fc.verdict(f, advance); err != nil {
			return false, err
		}
	}
	if fresh {
		if err := effect(ctx, tx); err != nil {
			return false, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return false, err
	}
	return fresh, nil
}

// checkWrite refuses a fence or offset no record can have.
func checkWrite(f consumer.Fence, offset int64) error {
	switch {
	case f.Topic == "":
		return errors.New("pgsink: the fence names no topic: pass the fence consumer.FenceOf returned")
	case f.Partition < 0:
		return fmt.Errorf("pgsink: fence partition %d: a partition is 0 or more", f.Partition)
	case f.Lo >= f.Hi || f.Hi > 1<<32:
		return fmt.Errorf("pgsink: fence range [%d, %d): want lo < hi <= 2^32 (a key-hash range)", f.Lo, f.Hi)
	case f.Token <= 0:
		return fmt.Errorf("pgsink: fence token %d: a token is an etcd revision, above 0", f.Token)
	case offset < 0:
		return fmt.Errorf("pgsink: offset %d: a record's offset is 0 or more", offset)
	}
	return nil
}

// Prune deletes the applied rows of a topic's partition below offset, to
// keep the table small: call it with the group's committed offset of the
// partition. A live owner never runs a record below it again (an operator's
// offset reset excepted), and a stale owner's late write of one is refused
// by its fence: the records it held were run again by their next owner,
// through the sink, under a newer token.
func (s *Sink) Prune(ctx context.Context, topic string, partition int32, below int64) (int64, error) {
	tx, err := s.db.BeginTx(ctx, txOptions)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	ct, err := tx.Exec(ctx, "DELETE FROM "+s.applied+" WHERE topic = $1 AND kafka_partition = $2 AND kafka_offset < $3", topic, partition, below)
	if err != nil {
		return 0, fmt.Errorf("pgsink: prune %s/%d below %d: %w", topic, partition, below, err)
	}
	return ct.RowsAffected(), tx.Commit(ctx)
}
