package pgsink

import (
	"context"
	"fmt"
)

// The sink's two tables, named from Config.Prefix:
//
//   - <prefix>applied: one row per record applied, keyed by topic,
//     partition and offset, with the token it was applied under;
//   - <prefix>fences: per topic and partition, the newest token written
//     through the sink for each hash range [lo, hi).
func (s *Sink) ddl() []string {
	return []string{
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	topic           text    NOT NULL,
	kafka_partition integer NOT NULL,
	kafka_offset    bigint  NOT NULL,
	token           bigint  NOT NULL,
	applied_at      timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (topic, kafka_partition, kafka_offset)
)`, s.applied),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	topic           text    NOT NULL,
	kafka_partition integer NOT NULL,
	lo              bigint  NOT NULL,
	hi              bigint  NOT NULL,
	token           bigint  NOT NULL,
	PRIMARY KEY (topic, kafka_partition, lo, hi)
)`, s.fences),
	}
}

// CreateSchema creates the sink's tables if they do not exist. Members
// may all call it at start: concurrent calls take turns on an advisory
// lock (two CREATE TABLE IF NOT EXISTS at once can fail on the catalog's
// unique index).
func (s *Sink) CreateSchema(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, txOptions)
	if err != nil {
		return fmt.Errorf("pgsink: create schema: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "keyshare pgsink schema "+s.prefix); err != nil {
		return fmt.Errorf("pgsink: create schema: %w", err)
	}
	for _, stmt := range s.ddl() {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("pgsink: create schema: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgsink: create schema: %w", err)
	}
	return nil
}
