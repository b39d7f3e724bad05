package statestore

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/keystate"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/testutil"
)

// group runs keyshare members with a Store each, on embedded etcd and the
// test's broker.
type group struct {
	t         *testing.T
	endpoints []string
	brokers   string
	name      string
	topic     string
	parts     int32
	// joined are more topics the members consume, co-partitioned with
	// topic (join_test.go); none by default.
	joined []string
	// disk: the members keep their state on disk, each in a Dir of its
	// own under dirs named by its id, which a member started again with
	// the same id finds (disk_test.go).
	disk bool
	dirs string
}

// topics are the topics the members consume.
func (g *group) topics() []string { return append([]string{g.topic}, g.joined...) }

func newGroup(t *testing.T, parts int32) *group {
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"events": parts})
	return &group{t: t, endpoints: e.Endpoints, brokers: k.Brokers, name: "g", topic: "events", parts: parts, dirs: t.TempDir()}
}

func (g *group) kafka() kafka.ConfigMap {
	return kafka.ConfigMap{"bootstrap.servers": g.brokers, "log_level": 3, "fetch.wait.max.ms": 50}
}

// member is one running member and its Store.
type member struct {
	id     string
	c      *consumer.Consumer
	store  *Store
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// start runs member id with handler h wrapped by its own Store; mutate
// changes its consumer settings.
func (g *group) start(id string, h consumer.Handler, mutate func(*consumer.Config)) *member {
	g.t.Helper()
	return g.run(id, func(s *Store, c *consumer.Config) { c.Handler = s.Handler(h) }, mutate)
}

// startBatch runs member id with batch handler h wrapped by its own Store.
func (g *group) startBatch(id string, h consumer.BatchHandler) *member {
	g.t.Helper()
	return g.run(id, func(s *Store, c *consumer.Config) {
		c.BatchHandler = s.BatchHandler(h)
		c.MaxBatchSize = 50
	}, nil)
}

func (g *group) run(id string, handle func(*Store, *consumer.Config), mutate func(*consumer.Config)) *member {
	g.t.Helper()
	sc := Config{Group: g.name, Topics: g.topics(), Kafka: g.kafka(), Logger: testutil.Logger(g.t).Named(id)}
	if g.disk {
		sc.Dir = filepath.Join(g.dirs, id)
	}
	store, err := New(g.t.Context(), sc)
	if err != nil {
		g.t.Fatal(err)
	}
	cfg := consumer.DefaultConfig()
	cfg.Group, cfg.Topics, cfg.MemberID = g.name, g.topics(), id
	if len(g.joined) > 0 {
		cfg.CoPartitioned = [][]string{g.topics()}
	}
	cfg.Kafka = g.kafka()
	handle(store, &cfg)
	cfg.SessionTTL = 2 * time.Second
	cfg.DrainTimeout = 10 * time.Second
	cfg.FlushInterval = 100 * time.Millisecond
	cfg.CommitInterval = 200 * time.Millisecond
	cfg.RebalanceDebounce = 50 * time.Millisecond
	cfg.Logger = testutil.Logger(g.t).Named(id)
	if mutate != nil {
		mutate(&cfg)
	}
	c, err := consumer.New(testutil.NewEtcdClient(g.t, g.endpoints), cfg)
	if err != nil {
		g.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{id: id, c: c, store: store, cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- c.Run(ctx) }()
	go store.Track(ctx, c)
	g.t.Cleanup(func() { m.stop(g.t) })
	return m
}

// stop ends the member's Run (a graceful leave) and closes its Store.
func (m *member) stop(t *testing.T) {
	t.Helper()
	m.once.Do(func() {
		m.cancel()
		select {
		case err := <-m.done:
			if err != nil {
				t.Errorf("member %s: Run: %v", m.id, err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("member %s did not stop within 60s", m.id)
		}
		m.store.Close()
	})
}

// count is the aggregation under test: each record adds one to its key's
// count, kept as a decimal string.
func count(ctx context.Context, m *kafka.Message) error {
	k := KeyOf(ctx, m)
	if k == nil {
		return errNoKey
	}
	n := 0
	if v, ok := k.Get(); ok {
		var err error
		if n, err = strconv.Atoi(string(v)); err != nil {
			return err
		}
	}
	k.Put([]byte(strconv.Itoa(n + 1)))
	return nil
}

var errNoKey = errors.New("count: KeyOf found no state for the record")

// states reads topic's changelog as a restore of every range would, and
// returns each key's state.
func (g *group) states(topic string) map[string][]byte {
	g.t.Helper()
	s := &Store{cfg: Config{Kafka: g.kafka()}.withDefaults(), log: testutil.Logger(g.t)}
	out := make(map[string][]byte)
	for p := range g.parts {
		rs, err := keystate.NewRestore(ledger.Full, keystate.DefaultConfig())
		if err != nil {
			g.t.Fatal(err)
		}
		var pr restoreProgress
		if err := s.readChangelog(g.t.Context(), DefaultChangelog(g.name, topic), p, &pr, rs.Add); err != nil {
			g.t.Fatal(err)
		}
		table, _, err := rs.Table(0)
		if err != nil {
			g.t.Fatal(err)
		}
		for e := range table.All() {
			if !e.Deleted {
				out[string(e.Key)] = e.Value
			}
		}
	}
	return out
}

// counts is each key's count in the group's changelog, as a restore of
// every range would read it.
func (g *group) counts() map[string]int {
	g.t.Helper()
	out := make(map[string]int)
	for k, v := range g.states(g.topic) {
		n, err := strconv.Atoi(string(v))
		if err != nil {
			g.t.Fatalf("key %q: state %q is no count", k, v)
		}
		out[k] = n
	}
	return out
}

// want is each key's number of records in produced.
func want(recs []testutil.Record) map[string]int {
	out := make(map[string]int)
	for _, r := range recs {
		out[string(r.Key)]++
	}
	return out
}

// waitCommitted waits until the group's committed offsets reach the end
// of what was produced.
func (g *group) waitCommitted(produced []kafka.TopicPartition) {
	g.t.Helper()
	end := make(map[int32]int64)
	for _, tp := range produced {
		end[tp.Partition] = max(end[tp.Partition], int64(tp.Offset)+1)
	}
	testutil.WaitFor(g.t, "the committed offsets at the end of the input", 90*time.Second, func() bool {
		got, err := testutil.ReadCommitted(g.brokers, g.name, g.topic, g.parts)
		if err != nil {
			return false
		}
		for p, e := range end {
			if got[p] < e {
				return false
			}
		}
		return true
	})
}

// checkCounts compares the changelog's counts with the records produced.
func (g *group) checkCounts(recs []testutil.Record) {
	g.t.Helper()
	got, exp := g.counts(), want(recs)
	bad := 0
	for k, n := range exp {
		if got[k] != n {
			bad++
			if bad <= 5 {
				g.t.Errorf("key %s: count %d, want %d (its records)", k, got[k], n)
			}
		}
	}
	for k := range got {
		if _, ok := exp[k]; !ok {
			g.t.Errorf("key %s has a count but no records", k)
		}
	}
	if bad > 5 {
		g.t.Errorf("... %d keys in all with a wrong count", bad)
	}
}
