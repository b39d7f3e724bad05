package pgsink_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/pgsink"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// group is a consumer group on embedded etcd and a broker, writing
// through PostgreSQL.
type group struct {
	t         *testing.T
	etcd      *clientv3.Client
	endpoints []string
	brokers   string
	pool      *pgxpool.Pool
	prefix    string
}

func newGroup(t *testing.T, prefix string) *group {
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	pool := newPool(t)
	return &group{t: t, etcd: cli, endpoints: e.Endpoints, brokers: k.Brokers, pool: pool, prefix: prefix}
}

// keyEffect is the effect of a record "key-K:SEQ": a row with the key,
// its sequence number and offset, and the member that wrote it.
func (g *group) keyEffect(member string) func(ctx context.Context, tx pgx.Tx, m *kafka.Message) error {
	return func(ctx context.Context, tx pgx.Tx, m *kafka.Message) error {
		key, seqText, _ := strings.Cut(string(m.Value), ":")
		seq, err := strconv.Atoi(seqText)
		if err != nil {
			return fmt.Errorf("value %q: %w", m.Value, err)
		}
		_, err = tx.Exec(ctx, "INSERT INTO "+g.prefix+"effects (key, seq, kafka_offset, writer) VALUES ($1, $2, $3, $4)",
			key, seq, int64(m.TopicPartition.Offset), member)
		return err
	}
}

// sink returns a member's sink (each member is a process of its own).
func (g *group) sink(unfenced bool) *pgsink.Sink {
	s, err := pgsink.New(g.pool, pgsink.Config{Prefix: g.prefix})
	if err != nil {
		g.t.Fatal(err)
	}
	if unfenced {
		pgsink.SkipFenceCheck(s)
	}
	return s
}

func (g *group) createTables() {
	s := g.sink(false)
	if err := s.CreateSchema(g.t.Context()); err != nil {
		g.t.Fatal(err)
	}
	if _, err := g.pool.Exec(g.t.Context(), `CREATE TABLE `+g.prefix+`effects (
	id bigserial PRIMARY KEY, key text NOT NULL, seq integer NOT NULL, kafka_offset bigint NOT NULL, writer text NOT NULL)`); err != nil {
		g.t.Fatal(err)
	}
}

// runner is a running member.
type runner struct {
	cancel context.CancelFunc
	done   chan error
}

func (g *group) start(id string, h consumer.Handler, drain time.Duration) *runner {
	g.t.Helper()
	return g.startWith(id, func(c *consumer.Config) { c.Handler = h }, drain)
}

// startWith starts member id with the handler set by set.
func (g *group) startWith(id string, set func(*consumer.Config), drain time.Duration) *runner {
	g.t.Helper()
	cfg := consumer.DefaultConfig()
	cfg.Group = "g"
	cfg.Topics = []string{"orders"}
	cfg.Kafka = kafka.ConfigMap{"bootstrap.servers": g.brokers, "log_level": 3, "fetch.wait.max.ms": 50}
	set(&cfg)
	cfg.MemberID = id
	cfg.SessionTTL = 2 * time.Second
	cfg.DrainTimeout = drain
	cfg.FlushInterval = 100 * time.Millisecond
	cfg.CommitInterval = 200 * time.Millisecond
	cfg.RebalanceDebounce = 50 * time.Millisecond
	cfg.Logger = testutil.Logger(g.t)
	c, err := consumer.New(testutil.NewEtcdClient(g.t, g.endpoints), cfg)
	if err != nil {
		g.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	g.t.Cleanup(func() { r.stop(g.t) })
	return r
}

// stop makes the member leave and waits for Run to return; once only.
func (r *runner) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	case <-time.After(60 * time.Second):
		t.Error("member did not stop within 60 s")
	}
}

// count is a count from the effects table.
func (g *group) count(query string, args ...any) int {
	var n int
	if err := g.pool.QueryRow(g.t.Context(), query, args...).Scan(&n); err != nil {
		g.t.Fatal(err)
	}
	return n
}

// check returns the effects' rows, distinct offsets, and effects applied
// after a later record of their key (by the records' own sequence).
func (g *group) check() (rows, offsets, outOfOrder int) {
	rows = g.count("SELECT count(*) FROM " + g.prefix + "effects")
	offsets = g.count("SELECT count(DISTINCT kafka_offset) FROM " + g.prefix + "effects")
	outOfOrder = g.count(`SELECT count(*) FROM (
	SELECT seq, max(seq) OVER (PARTITION BY key ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
	FROM ` + g.prefix + `effects) x WHERE seq <= before`)
	return rows, offsets, outOfOrder
}

// TestEffectsOnceThroughHandoffs: members write every record's effect
// through the sink while a member joins and the first leaves: every
// produced record's effect is in the database once, and each key's effects
// are in the order of its records. With the sink's Handler and its
// BatchHandler.
func TestEffectsOnceThroughHandoffs(t *testing.T) {
	testutil.ParallelOnKfake(t)
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			g := newGroup(t, "handoffs_")
			g.createTables()
			member := func(id string) *runner {
				s := g.sink(false)
				return g.startWith(id, func(c *consumer.Config) {
					if batch {
						c.Handler, c.BatchHandler = nil, s.BatchHandler(g.keyEffect(id))
					} else {
						c.Handler = s.Handler(g.keyEffect(id))
					}
				}, 10*time.Second)
			}
			recs := testutil.KeyedRecords(3000, 100)
			a := member("a")
			testutil.Produce(t, g.brokers, "orders", recs[:1000])
			member("b")
			// The next records are produced once b owns a range, so that
			// both members write (a may finish the first ones before).
			testutil.WaitFor(t, "b owns a range", 30*time.Second, func() bool {
				snap, err := coord.ReadSnapshot(t.Context(), g.etcd, schema.Group{Name: "g"})
				return err == nil && len(snap.AssignmentOf("b").Ranges) > 0
			})
			testutil.Produce(t, g.brokers, "orders", recs[1000:2000])
			testutil.WaitFor(t, "b writes", 30*time.Second, func() bool {
				return g.count("SELECT count(*) FROM "+g.prefix+"effects WHERE writer = 'b'") > 0
			})
			a.stop(t)
			testutil.Produce(t, g.brokers, "orders", recs[2000:])
			testutil.WaitFor(t, "every record's effect", 60*time.Second, func() bool {
				return g.count("SELECT count(DISTINCT kafka_offset) FROM "+g.prefix+"effects") == len(recs)
			})
			rows, offsets, outOfOrder := g.check()
			if rows != len(recs) || offsets != len(recs) || outOfOrder != 0 {
				t.Fatalf("effects: %d rows of %d offsets, %d out of order; want %d once each, in order", rows, offsets, outOfOrder, len(recs))
			}
			for _, m := range []string{"a", "b"} {
				if n := g.count("SELECT count(*) FROM "+g.prefix+"effects WHERE writer = $1", m); n == 0 {
					t.Errorf("member %s wrote no effect", m)
				}
			}
		})
	}
}

// TestZombieMemberFenced: member a's handler stalls on a record of key
// "z" (a long pause) before it writes, and then writes with its record's
// context's values but not its end (context.WithoutCancel), as a process
// paused whole would: nothing stops the write but the fence. a leaves; its drain gives up on the
// stalled record and hands the range to b, which runs key z's records and
// the rest. The applied rows are pruned (the group committed past them).
// Then a's handler wakes and writes, under the range's old token: the sink
// refuses it. With the fence check off, the same write applies the record
// a second time, after its key's later records. With the sink's Handler
// and its BatchHandler (whose late batch is the one holding z:0).
func TestZombieMemberFenced(t *testing.T) {
	testutil.ParallelOnKfake(t)
	for _, tc := range []struct {
		name            string
		unfenced, batch bool
	}{{"fenced", false, false}, {"unfenced", true, false}, {"fenced-batch", false, true}, {"unfenced-batch", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGroup(t, strings.ReplaceAll(tc.name, "-", "_")+"_")
			g.createTables()
			recs := []testutil.Record{{Key: []byte("z"), Value: []byte("z:0")}}
			recs = append(recs, testutil.KeyedRecords(300, 30)...)
			recs = append(recs, testutil.Record{Key: []byte("z"), Value: []byte("z:1")}, testutil.Record{Key: []byte("z"), Value: []byte("z:2")})

			aSink := g.sink(tc.unfenced)
			stalled, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			// stall holds the first call with z:0 (a record, or a batch
			// holding it) until release, and reports whether it did.
			stall := func(msgs ...*kafka.Message) bool {
				held := false
				for _, m := range msgs {
					if string(m.Value) == "z:0" {
						once.Do(func() { held = true })
					}
				}
				if held {
					close(stalled)
					<-release
				}
				return held
			}
			var a *runner
			if tc.batch {
				aWrite := aSink.BatchHandler(g.keyEffect("a"))
				a = g.startWith("a", func(c *consumer.Config) {
					c.Handler, c.BatchHandler = nil, func(ctx context.Context, batch []*kafka.Message) []error {
						if stall(batch...) {
							// As a paused process would, it writes as if
							// nothing had ended its context.
							return aWrite(context.WithoutCancel(ctx), batch)
						}
						return aWrite(ctx, batch)
					}
				}, 300*time.Millisecond)
			} else {
				aWrite := aSink.Handler(g.keyEffect("a"))
				a = g.start("a", func(ctx context.Context, m *kafka.Message) error {
					if stall(m) {
						return aWrite(context.WithoutCancel(ctx), m) // as above
					}
					return aWrite(ctx, m)
				}, 300*time.Millisecond)
			}
			var woke sync.Once
			wake := func() { woke.Do(func() { close(release) }) }
			t.Cleanup(wake) // before a's cleanup waits for its handlers
			testutil.Produce(t, g.brokers, "orders", recs)
			select {
			case <-stalled:
			case <-time.After(30 * time.Second):
				t.Fatal("a never handled z:0")
			}
			bSink := g.sink(tc.unfenced)
			g.start("b", bSink.Handler(g.keyEffect("b")), 10*time.Second)
			stopped := make(chan struct{})
			go func() { a.stop(t); close(stopped) }() // returns once the stalled handler does
			testutil.WaitFor(t, "b writes every record", 60*time.Second, func() bool {
				return g.count("SELECT count(DISTINCT kafka_offset) FROM "+g.prefix+"effects") == len(recs)
			})
			if n := g.count("SELECT count(*) FROM " + g.prefix + "effects WHERE key = 'z' AND writer = 'b'"); n != 3 {
				t.Fatalf("b wrote %d of key z's 3 effects, want all", n)
			}
			if _, err := aSink.Prune(t.Context(), "orders", 0, int64(len(recs))); err != nil {
				t.Fatal(err)
			}
			before := aSink.Stats()
			wake()
			select {
			case <-stopped:
			case <-time.After(30 * time.Second):
				t.Fatal("a did not stop after its handler woke")
			}
			late := aSink.Stats()
			attempted := (late.Applied + late.Fenced + late.Duplicates) - (before.Applied + before.Fenced + before.Duplicates)
			accepted := late.Applied - before.Applied
			rows, offsets, outOfOrder := g.check()
			t.Logf("a's late writes: %d attempted, %d accepted; effects: %d rows of %d offsets, %d out of order", attempted, accepted, rows, offsets, outOfOrder)
			// One record; with batches, the batch holding z:0.
			if attempted < 1 || (!tc.batch && attempted != 1) {
				t.Fatalf("a's late writes: %d attempted, want 1 (or a batch)", attempted)
			}
			if !tc.unfenced {
				if accepted != 0 || late.Fenced-before.Fenced != attempted {
					t.Errorf("a's late writes accepted: stats %+v then %+v", before, late)
				}
				if rows != len(recs) || offsets != len(recs) || outOfOrder != 0 {
					t.Errorf("effects: %d rows of %d offsets, %d out of order; want %d once each, in order", rows, offsets, outOfOrder, len(recs))
				}
				return
			}
			if accepted != attempted || rows != len(recs)+int(accepted) || outOfOrder == 0 {
				t.Errorf("without the fence check: %d accepted, %d rows, %d out of order; want a's stale write applied again, out of order", accepted, rows, outOfOrder)
			}
		})
	}
}
