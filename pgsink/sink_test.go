package pgsink_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/pgsink"
	"github.com/keyshare/keyshare/testutil"
)

// TestMain stops the shared Apache Kafka broker after the tests when
// KEYSHARE_KAFKA=apache (make test-kafka); on kfake it only runs them.
func TestMain(m *testing.M) { os.Exit(testutil.RunTests(m)) }

// newPool starts PostgreSQL for the test and returns a pool on it.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pg := testutil.StartPostgres(t)
	pool, err := pgxpool.New(context.Background(), pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newSink returns a sink with its tables (prefix names them) and an
// effects table <prefix>effects: one row per effect applied, in the order
// applied (id), with the record's key, offset and who wrote it.
func newSink(t testing.TB, pool *pgxpool.Pool, prefix string) *pgsink.Sink {
	t.Helper()
	s, err := pgsink.New(pool, pgsink.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSchema(t.Context()); err != nil { // idempotent
		t.Fatalf("second CreateSchema: %v", err)
	}
	if _, err := pool.Exec(t.Context(), fmt.Sprintf(`CREATE TABLE %seffects (
	id bigserial PRIMARY KEY, key text NOT NULL, kafka_offset bigint NOT NULL, writer text NOT NULL)`, prefix)); err != nil {
		t.Fatal(err)
	}
	return s
}

// effect inserts one effect row.
func effect(prefix, key string, offset int64, writer string) pgsink.Effect {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+prefix+"effects (key, kafka_offset, writer) VALUES ($1, $2, $3)", key, offset, writer)
		return err
	}
}

// effectsCheck is what the effects table says.
type effectsCheck struct {
	rows, offsets int // effect rows, distinct offsets among them
	outOfOrder    int // effects applied after a later offset of their key
	byWriter      map[string]int
}

func checkEffects(t testing.TB, pool *pgxpool.Pool, prefix string) effectsCheck {
	t.Helper()
	var c effectsCheck
	ctx := t.Context()
	if err := pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT (key, kafka_offset)) FROM "+prefix+"effects").Scan(&c.rows, &c.offsets); err != nil {
		t.Fatal(err)
	}
	// Per key, in the order applied, each offset must be above the
	// highest applied before it.
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM (
	SELECT kafka_offset, max(kafka_offset) OVER (PARTITION BY key ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
	FROM `+prefix+`effects) x WHERE kafka_offset <= before`).Scan(&c.outOfOrder); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, "SELECT writer, count(*) FROM "+prefix+"effects GROUP BY writer")
	if err != nil {
		t.Fatal(err)
	}
	c.byWriter = map[string]int{}
	for rows.Next() {
		var w string
		var n int
		if err := rows.Scan(&w, &n); err != nil {
			t.Fatal(err)
		}
		c.byWriter[w] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return c
}

const space = uint64(1) << 32

// TestApplyOnce: each offset's effect applies once; applying it again
// (a re-run after a crash) skips the effect and succeeds; an effect's
// error keeps nothing of its transaction; a fence no record has is refused
// with a clear error.
func TestApplyOnce(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	s := newSink(t, pool, "once_")
	f := consumer.Fence{Topic: "orders", Partition: 0, Lo: 0, Hi: space, Token: 5}
	for o := range int64(10) {
		applied, err := s.Apply(t.Context(), f, o, effect("once_", "k", o, "a"))
		if err != nil || !applied {
			t.Fatalf("offset %d: applied %v, %v", o, applied, err)
		}
	}
	applied, err := s.Apply(t.Context(), f, 3, effect("once_", "k", 3, "a"))
	if err != nil || applied {
		t.Fatalf("offset 3 again: applied %v, %v; want skipped", applied, err)
	}
	boom := errors.New("boom")
	_, err = s.Apply(t.Context(), f, 10, func(ctx context.Context, tx pgx.Tx) error {
		if err := effect("once_", "k", 10, "a")(ctx, tx); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("failing effect: %v, want boom", err)
	}
	// Offset 10 was not recorded applied: it applies now.
	if applied, err := s.Apply(t.Context(), f, 10, effect("once_", "k", 10, "a")); err != nil || !applied {
		t.Fatalf("offset 10 after its failure: applied %v, %v", applied, err)
	}
	c := checkEffects(t, pool, "once_")
	if c.rows != 11 || c.offsets != 11 || c.outOfOrder != 0 {
		t.Fatalf("effects %+v, want 11 rows of 11 offsets in order", c)
	}
	if st := s.Stats(); st != (pgsink.Stats{Applied: 11, Duplicates: 1}) {
		t.Fatalf("stats %+v", st)
	}
	var fences, lo, hi, token int64
	if err := pool.QueryRow(t.Context(), "SELECT count(*), min(lo), min(hi), min(token) FROM once_fences").Scan(&fences, &lo, &hi, &token); err != nil {
		t.Fatal(err)
	}
	if fences != 1 || lo != 0 || hi != int64(space) || token != 5 {
		t.Fatalf("fences: %d rows, [%d, %d) token %d; want one, the whole range at 5", fences, lo, hi, token)
	}
	for _, bad := range []consumer.Fence{
		{Partition: 0, Lo: 0, Hi: space, Token: 5},
		{Topic: "orders", Lo: 5, Hi: 5, Token: 5},
		{Topic: "orders", Lo: 0, Hi: space + 1, Token: 5},
		{Topic: "orders", Lo: 0, Hi: space, Token: 0},
	} {
		if _, err := s.Apply(t.Context(), bad, 0, effect("once_", "k", 0, "a")); err == nil {
			t.Errorf("fence %+v accepted", bad)
		}
	}
	if _, err := pgsink.New(pool, pgsink.Config{Prefix: "Bad-Name"}); err == nil {
		t.Error("prefix Bad-Name accepted")
	}
}

// zombie runs a handoff against sink s, with fences built directly: owner
// a holds the whole range under token 5 and applies key k's offsets 0..2;
// the leader splits it (a keeps the low half under token 7) and hands the
// high half, where key k is, to b (token 9). a stalls on offset 3 past its
// lease; b runs 3, 4, 5; the applied rows below 6 are pruned (the group
// committed 6). Then a's stalled write of offset 3 and a late start of 6
// arrive, and b goes on with 6 and 7. It returns a's late attempts and
// how many of them applied, and checks that a's write in its kept half
// applies.
func zombie(t *testing.T, pool *pgxpool.Pool, s *pgsink.Sink, prefix string) (attempts, accepted int) {
	t.Helper()
	ctx := t.Context()
	whole := consumer.Fence{Topic: "orders", Partition: 0, Lo: 0, Hi: space, Token: 5}
	low := consumer.Fence{Topic: "orders", Partition: 0, Lo: 0, Hi: space / 2, Token: 7}
	high := consumer.Fence{Topic: "orders", Partition: 0, Lo: space / 2, Hi: space, Token: 9}
	apply := func(f consumer.Fence, key string, o int64, writer string) (bool, error) {
		return s.Apply(ctx, f, o, effect(prefix, key, o, writer))
	}
	must := func(applied bool, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for o := range int64(3) {
		must(apply(whole, "k", o, "a"))
	}
	must(apply(high, "k", 3, "b"))
	must(apply(high, "k", 4, "b"))
	must(apply(high, "k", 5, "b"))
	if _, err := s.Prune(ctx, "orders", 0, 6); err != nil {
		t.Fatal(err)
	}
	for _, o := range []int64{3, 6} {
		attempts++
		applied, err := apply(whole, "k", o, "a-late")
		var fe *pgsink.FencedError
		switch {
		case err == nil && applied:
			accepted++
		case errors.As(err, &fe) && errors.Is(err, consumer.ErrFenced):
			if fe.Newest != 9 || fe.Fence != whole {
				t.Errorf("fenced error %+v: want newest 9 for the whole range", fe)
			}
		default:
			t.Fatalf("a's late write of %d: applied %v, %v", o, applied, err)
		}
	}
	must(apply(high, "k", 6, "b"))
	must(apply(high, "k", 7, "b"))
	// a still owns the low half: its key j there applies under token 7.
	if applied, err := apply(low, "j", 8, "a"); err != nil || !applied {
		t.Fatalf("a's write in the half it kept: applied %v, %v", applied, err)
	}
	return attempts, accepted
}

// TestStaleFenceRefused: a stale owner's writes after the next owner's
// are refused, so every key's effects apply once and in offset order;
// without the fence check the same writes apply a record twice and out of
// order.
func TestStaleFenceRefused(t *testing.T) {
	t.Parallel()
	pool := newPool(t)

	fenced := newSink(t, pool, "fenced_")
	attempts, accepted := zombie(t, pool, fenced, "fenced_")
	c := checkEffects(t, pool, "fenced_")
	if attempts == 0 || accepted != 0 {
		t.Errorf("fence on: the stale owner's late writes: %d attempted, %d accepted; want some attempted, none accepted", attempts, accepted)
	}
	if st := fenced.Stats(); st.Fenced != int64(attempts) {
		t.Errorf("fence on: stats %+v, want %d fenced", st, attempts)
	}
	if c.rows != 9 || c.offsets != 9 || c.outOfOrder != 0 || c.byWriter["a-late"] != 0 {
		t.Errorf("fence on: effects %+v; want 9 effects (key k 0..7 once each, key j 8), in order, none late", c)
	}

	unfenced := newSink(t, pool, "unfenced_")
	pgsink.SkipFenceCheck(unfenced)
	attempts, accepted = zombie(t, pool, unfenced, "unfenced_")
	c = checkEffects(t, pool, "unfenced_")
	if attempts == 0 || accepted == 0 {
		t.Errorf("fence off: %d attempted, %d accepted; want the late writes through", attempts, accepted)
	}
	if c.rows == c.offsets || c.outOfOrder == 0 {
		t.Errorf("fence off: effects %+v; the stale owner's writes should have applied offset 3 twice and 6 ahead of b", c)
	}
}

// TestConcurrentWriters: many goroutines apply records of one partition
// under two owners' fences at once (the shared lock path, and the first
// write of each fence taking it exclusive): every record applies once.
func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	s := newSink(t, pool, "conc_")
	fences := []consumer.Fence{
		{Topic: "orders", Partition: 1, Lo: 0, Hi: space / 2, Token: 11},
		{Topic: "orders", Partition: 1, Lo: space / 2, Hi: space, Token: 12},
	}
	const per = 200
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			f := fences[w%2]
			for i := range per / 4 {
				o := int64(w*per + i)
				key := fmt.Sprintf("w%d", w)
				// Each record twice: a re-run is skipped.
				for range 2 {
					if _, err := s.Apply(t.Context(), f, o, effect("conc_", key, o, "w")); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	c := checkEffects(t, pool, "conc_")
	want := 8 * per / 4
	if c.rows != want || c.offsets != want || c.outOfOrder != 0 {
		t.Fatalf("effects %+v, want %d once each, in order", c, want)
	}
	if st := s.Stats(); st.Applied != int64(want) || st.Duplicates != int64(want) || st.Fenced != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestApplyBatch: one transaction for records under several fences: a
// record under a stale fence is refused and nothing of it is written, the
// others apply, a record applied before is skipped; an effect's error
// fails the whole batch and keeps nothing.
func TestApplyBatch(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	s := newSink(t, pool, "batch_")
	ctx := t.Context()
	whole := consumer.Fence{Topic: "orders", Partition: 0, Lo: 0, Hi: space, Token: 5}
	high := consumer.Fence{Topic: "orders", Partition: 0, Lo: space / 2, Hi: space, Token: 9}
	other := consumer.Fence{Topic: "orders", Partition: 1, Lo: 0, Hi: space, Token: 6}
	if _, err := s.Apply(ctx, high, 0, effect("batch_", "h", 0, "b")); err != nil {
		t.Fatal(err)
	}
	fences := []consumer.Fence{high, whole, other, high, other}
	offsets := []int64{0, 1, 0, 2, 1} // high's 0 is applied already
	var effects []pgsink.Effect
	for i, f := range fences {
		effects = append(effects, effect("batch_", fmt.Sprintf("p%d", f.Partition), offsets[i], fmt.Sprint(f.Token)))
	}
	res := pgsink.ApplyBatch(s, ctx, fences, offsets, effects)
	for i, err := range res {
		if stale := fences[i] == whole; stale != errors.Is(err, consumer.ErrFenced) || (!stale && err != nil) {
			t.Errorf("record %d under %+v: %v", i, fences[i], err)
		}
	}
	c := checkEffects(t, pool, "batch_")
	if c.rows != 4 || c.byWriter["5"] != 0 {
		t.Fatalf("effects %+v: want high's 0 and 2 and other's 0 and 1, nothing under the stale fence", c)
	}
	var stale int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM batch_applied WHERE token = 5").Scan(&stale); err != nil || stale != 0 {
		t.Fatalf("applied rows under the stale fence: %d, %v", stale, err)
	}
	if st := s.Stats(); st != (pgsink.Stats{Applied: 4, Duplicates: 1, Fenced: 1}) {
		t.Fatalf("stats %+v", st)
	}
	boom := errors.New("boom")
	res = pgsink.ApplyBatch(s, ctx, []consumer.Fence{other, other}, []int64{2, 3}, []pgsink.Effect{
		effect("batch_", "p1", 2, "6"),
		func(context.Context, pgx.Tx) error { return boom },
	})
	for i, err := range res {
		if !errors.Is(err, boom) {
			t.Errorf("record %d of the failing batch: %v, want boom", i, err)
		}
	}
	if c := checkEffects(t, pool, "batch_"); c.rows != 4 {
		t.Fatalf("effects after the failing batch: %+v, want the 4 from before", c)
	}
}
