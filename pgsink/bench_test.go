package pgsink_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/pgsink"
)

// BenchmarkApply measures the cost of a record written through the sink
// against the same effect (one row inserted) written plainly, on the
// embedded PostgreSQL over TCP on loopback: an INSERT on its own
// (autocommit), an INSERT in a transaction, the sink without the fence
// check (applied row only), the sink, and the sink's batch transaction
// (BatchHandler) of 100 records. The parallel cases run 8
// goroutines (4 per GOMAXPROCS, on the pool's 4 connections) on one
// partition's fence, which share the partition's lock.
// Run with:
//
//	go test -run '^$' -bench BenchmarkApply -benchtime 3000x ./pgsink/
func BenchmarkApply(b *testing.B) {
	pool := newPool(b)
	f := consumer.Fence{Topic: "orders", Partition: 0, Lo: 0, Hi: space, Token: 7}
	var offset atomic.Int64
	insert := func(prefix string) pgsink.Effect {
		return func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+prefix+"effects (key, kafka_offset, writer) VALUES ($1, $2, $3)", "k", offset.Load(), "bench")
			return err
		}
	}
	newSink(b, pool, "plain_") // its effects table, for the plain inserts
	fenced := newSink(b, pool, "fenced_")
	unfenced := newSink(b, pool, "unfenced_")
	pgsink.SkipFenceCheck(unfenced)
	cases := []struct {
		name string
		one  func(ctx context.Context) error
	}{
		{"insert", func(ctx context.Context) error {
			_, err := pool.Exec(ctx, "INSERT INTO plain_effects (key, kafka_offset, writer) VALUES ($1, $2, $3)", "k", offset.Add(1), "bench")
			return err
		}},
		{"insert-in-tx", func(ctx context.Context) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "INSERT INTO plain_effects (key, kafka_offset, writer) VALUES ($1, $2, $3)", "k", offset.Add(1), "bench")
				return err
			})
		}},
		{"sink-unfenced", func(ctx context.Context) error {
			_, err := unfenced.Apply(ctx, f, offset.Add(1), insert("unfenced_"))
			return err
		}},
		{"sink", func(ctx context.Context) error {
			_, err := fenced.Apply(ctx, f, offset.Add(1), insert("fenced_"))
			return err
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.one(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// The BatchHandler's transaction: 100 records a transaction; ns/op
	// is a batch's, ns/record a record's.
	b.Run("sink-batch100", func(b *testing.B) {
		const n = 100
		fences := make([]consumer.Fence, n)
		offsets := make([]int64, n)
		effects := make([]pgsink.Effect, n)
		for b.Loop() {
			for i := range n {
				o := offset.Add(1)
				fences[i], offsets[i] = f, o
				effects[i] = func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "INSERT INTO fenced_effects (key, kafka_offset, writer) VALUES ($1, $2, $3)", "k", o, "bench")
					return err
				}
			}
			for _, err := range pgsink.ApplyBatch(fenced, b.Context(), fences, offsets, effects) {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
	})
	for _, c := range cases {
		b.Run(c.name+"-parallel8", func(b *testing.B) {
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := c.one(context.Background()); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
