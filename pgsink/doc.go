// Package pgsink applies keyshare records to PostgreSQL effectively once:
// each record's effect, a row that says the record was applied, and a
// check of the record's fencing token (consumer.FenceOf) commit in one
// transaction, or none of them does.
//
//	sink, err := pgsink.New(pool, pgsink.Config{}) // pool: a *pgxpool.Pool
//	if err != nil { ... }
//	if err := sink.CreateSchema(ctx); err != nil { ... }
//	cfg.Handler = sink.Handler(func(ctx context.Context, tx pgx.Tx, m *kafka.Message) error {
//		_, err := tx.Exec(ctx, "UPDATE balances SET amount = amount + $2 WHERE account = $1", m.Key, amountOf(m))
//		return err
//	})
//
// A record applied before (a crash re-ran it) is skipped: its effect is
// not applied again, and the handler succeeds. A record whose fence is
// older than one a later owner of an overlapping hash range has written
// through the sink is refused with a *FencedError (errors.Is
// consumer.ErrFenced), which the consumer neither marks done nor
// dead-letters: the range's next owner runs the record.
//
// docs/exactly-once.md has the argument, the transaction and what is not
// covered (effects outside the transaction).
package pgsink
