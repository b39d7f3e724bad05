package statestore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/keystate"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/testutil"
)

// The costs of keyed state, measured on a real broker (kfake, or Apache
// Kafka with KEYSHARE_KAFKA=apache) through librdkafka. Nothing here runs
// without -bench:
//
//	go test -run '^$' -bench BenchmarkRestoreFromKafka -benchtime 1x -count 2 ./statestore/
//	go test -run '^$' -bench BenchmarkStateCostPerRecord -benchtime 1x -count 2 ./statestore/

// BenchmarkRestoreFromKafka restores the whole hash space of a changelog
// partition holding one entry per key, as a member does when it takes a
// range: the Store's reader (readChangelog) feeding keystate's restore
// rule. The changelog is filled before the timer starts. Besides ns/op it
// reports the seconds of one restore, the keys restored per second, the
// changelog bytes read (keys, values and headers), the bytes the table
// counts against its bound, and the Go heap the restored table holds per
// key (what dropping the table frees, which leaves out the heap of kfake,
// in the same process).
func BenchmarkRestoreFromKafka(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			topic := DefaultChangelog("g", "events")
			k := testutil.StartKafka(b, map[string]int32{topic: 1})
			s := &Store{cfg: Config{Kafka: readerKafka(b, k.Brokers)}.withDefaults(), log: hclog.NewNullLogger()}
			began := time.Now()
			read := fillChangelog(b, k.Brokers, topic, n, 0)
			b.Logf("filled %s with %d entries (%d bytes) in %s", topic, n, read, time.Since(began).Round(time.Millisecond))

			var tableBytes int64
			var heap uint64
			b.ResetTimer()
			for range b.N {
				table, err := restoreFull(b.Context(), s, topic)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if table.Len() != n {
					b.Fatalf("restored %d keys of the %d in the changelog", table.Len(), n)
				}
				tableBytes = table.Bytes()
				heap = heldBy(func() { table = nil })
				b.StartTimer()
			}
			perRestore := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(perRestore, "s/restore")
			b.ReportMetric(float64(n)/perRestore, "keys/s")
			b.ReportMetric(float64(read), "changelog-B")
			b.ReportMetric(float64(tableBytes), "table-B")
			b.ReportMetric(float64(heap)/float64(n), "heap-B/key")
		})
	}
}

// heldBy returns the Go heap that drop frees: the heap in use after a
// collection, before drop and after it. Measured so, rather than as the
// growth over the restore, it leaves out what the broker in the same
// process (kfake) frees or keeps meanwhile.
func heldBy(drop func()) uint64 {
	var with, without runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&with)
	drop()
	runtime.GC()
	runtime.ReadMemStats(&without)
	return with.HeapAlloc - min(with.HeapAlloc, without.HeapAlloc)
}

// readerKafka is the reader's client settings: the harness's, and those
// of KEYSHARE_BENCH_READER ("name=value ...", librdkafka's names), to
// measure a tuning of the reader before the Store adopts it, e.g.
//
//	KEYSHARE_BENCH_READER=fetch.queue.backoff.ms=10 go test -run '^$' -bench BenchmarkRestoreFromKafka -benchtime 1x ./statestore/
func readerKafka(b testing.TB, brokers string) kafka.ConfigMap {
	cm := benchKafka(brokers)
	for _, kv := range strings.Fields(os.Getenv("KEYSHARE_BENCH_READER")) {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			b.Fatalf("KEYSHARE_BENCH_READER: %q is not name=value: give librdkafka settings as name=value, separated by spaces", kv)
		}
		cm[name] = value
	}
	return cm
}

// restoreFull reads partition 0 of changelog topic into the table of the
// whole hash space, with the Store's table bound, as Store.restoreTable
// does.
func restoreFull(ctx context.Context, s *Store, topic string) (*keystate.Table, error) {
	rs, err := keystate.NewRestore(ledger.Full, s.cfg.Table)
	if err != nil {
		return nil, err
	}
	var pr restoreProgress
	if err := s.readChangelog(ctx, topic, 0, &pr, rs.Add); err != nil {
		return nil, err
	}
	table, _, err := rs.Table(1)
	return table, err
}

// fillChangelog appends n entries to partition 0 of topic, one per key
// ("key-0", ...), each an 8-byte count, key i's applied at input offset
// applied+i, and returns the bytes a restore
// reads of them: keys, values and headers. It produces without waiting
// for each report, in large batches, so that filling a million keys takes
// seconds rather than the round trip per entry of the Store's appends.
func fillChangelog(b *testing.B, brokers, topic string, n int, applied int64) int64 {
	b.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers":            brokers,
		"linger.ms":                    20,
		"batch.size":                   1 << 20,
		"queue.buffering.max.messages": 200_000,
		"log_level":                    3,
	})
	if err != nil {
		b.Fatalf("producer: %v", err)
	}
	defer p.Close()
	reports := make(chan kafka.Event, 4096)
	failed := make(chan error, 1)
	var delivered sync.WaitGroup
	delivered.Add(n)
	go func() {
		for ev := range reports {
			if m := ev.(*kafka.Message); m.TopicPartition.Error != nil {
				select {
				case failed <- m.TopicPartition.Error:
				default:
				}
			}
			delivered.Done()
		}
	}()
	var read int64
	for i := range n {
		e := keystate.Entry{Key: fmt.Appendf(nil, "key-%d", i), Value: binary.BigEndian.AppendUint64(nil, uint64(i)), Applied: applied + int64(i), Fence: 1}
		m := EntryMessage(topic, 0, e)
		read += int64(len(m.Key) + len(m.Value))
		for _, h := range m.Headers {
			read += int64(len(h.Key) + len(h.Value))
		}
		for {
			err := p.Produce(m, reports)
			if err == nil {
				break
			}
			if kerr := (kafka.Error{}); !errors.As(err, &kerr) || kerr.Code() != kafka.ErrQueueFull {
				b.Fatalf("produce entry %d: %v", i, err)
			}
			p.Flush(10) // the local queue is full: let batches go out
		}
	}
	if left := p.Flush(int((2 * time.Minute) / time.Millisecond)); left > 0 {
		b.Fatalf("fill: %d of %d entries not delivered after 2 minutes", left, n)
	}
	delivered.Wait()
	close(reports)
	select {
	case err := <-failed:
		b.Fatalf("fill: an entry was not delivered: %v", err)
	default:
	}
	return read
}

// benchKafka is the members' and the reader's client settings, the
// harness's (group.kafka).
func benchKafka(brokers string) kafka.ConfigMap {
	return (&group{brokers: brokers}).kafka()
}

// BenchmarkStateCostPerRecord compares one member's throughput on one
// partition holding a per-key count in the Store (each change appended
// to the changelog and acknowledged before its record is done) with the
// same member counting in a map in memory (no Store, nothing written). It
// reports records/s of both and the state's cost per record in µs:
//
//   - record/concurrency=16 and 64: a Handler (count) at the default
//     Concurrency and at 64. A record waits for its append's round trip,
//     so the stateful rate grows with the keys handled at once.
//   - batch/concurrency=16: a BatchHandler (countBatch) with the default
//     MaxBatchSize of 100, whose batch's changes are appended together.
//   - .../disk: the same with the Store's state on disk (Config.Dir).
//
// Both count the same records, produced before the timer starts; each
// run is a new group reading them from the start, timed from its first
// record done to its last (ns/op is the whole iteration, both members'
// start and stop included).
func BenchmarkStateCostPerRecord(b *testing.B) {
	const records, keys = 20_000, 1_000
	_, e := testutil.StartEtcd(b)
	k := testutil.StartKafka(b, map[string]int32{"events": 1})
	recs := testutil.KeyedRecords(records, keys)
	testutil.Produce(b, k.Brokers, "events", recs)
	exp := want(recs)
	runs := 0
	for _, mode := range []costMode{{false, 16, false}, {false, 64, false}, {true, 16, false}, {false, 16, true}, {true, 16, true}} {
		b.Run(mode.String(), func(b *testing.B) {
			run := func(withStore bool) time.Duration {
				runs++
				return runToEnd(b, e.Endpoints, k.Brokers, fmt.Sprintf("g%d", runs), mode, withStore, exp)
			}
			var stateless, stateful time.Duration
			for range b.N {
				stateless += run(false)
				stateful += run(true)
			}
			perRecord := func(d time.Duration) float64 { return d.Seconds() / float64(b.N*(records-1)) }
			b.ReportMetric(1/perRecord(stateless), "stateless-rec/s")
			b.ReportMetric(1/perRecord(stateful), "state-rec/s")
			b.ReportMetric((perRecord(stateful)-perRecord(stateless))*1e6, "state-µs/rec")
		})
	}
}

// costMode is how the member of a cost run handles its records.
type costMode struct {
	batch       bool // a BatchHandler rather than a Handler
	concurrency int  // consumer.Config.Concurrency
	disk        bool // the Store's state on disk (Config.Dir)
}

func (m costMode) String() string {
	kind := "record"
	if m.batch {
		kind = "batch"
	}
	if m.disk {
		return fmt.Sprintf("%s/concurrency=%d/disk", kind, m.concurrency)
	}
	return fmt.Sprintf("%s/concurrency=%d", kind, m.concurrency)
}

// runToEnd runs one member of a new group over the topic "events" until it
// has done every record counted in exp, counting them in a Store when
// withStore and in a map otherwise, and returns the time from its first
// record done to its last. It then checks the counts against exp.
func runToEnd(b *testing.B, endpoints []string, brokers, groupName string, mode costMode, withStore bool, exp map[string]int) time.Duration {
	b.Helper()
	records := 0
	for _, n := range exp {
		records += n
	}
	var first, last, done atomic.Int64 // first and last in unix nanoseconds
	finished := func(n int) {
		now := time.Now().UnixNano()
		first.CompareAndSwap(0, now)
		if done.Add(int64(n)) == int64(records) {
			last.Store(now)
		}
	}
	cfg := memberConfig(groupName, brokers)
	cfg.Concurrency = mode.concurrency
	cfg.Logger = testutil.Logger(b).Named(groupName)
	mem := newMapCount()
	var store *Store
	if withStore {
		var err error
		sc := Config{Group: groupName, Topics: []string{"events"}, Kafka: benchKafka(brokers), Logger: cfg.Logger}
		if mode.disk {
			sc.Dir = b.TempDir()
		}
		store, err = New(b.Context(), sc)
		if err != nil {
			b.Fatal(err)
		}
		defer store.Close()
	}
	installCount(&cfg, mode, store, mem, finished)
	c, err := consumer.New(testutil.NewEtcdClient(b, endpoints), cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	testutil.WaitFor(b, groupName+" to do every record", 5*time.Minute, func() bool { return last.Load() != 0 })
	cancel()
	if err := <-ran; err != nil {
		b.Fatalf("member of %s: Run: %v", groupName, err)
	}
	if withStore {
		checkChangelogCounts(b, store, exp)
	} else if got := mem.snapshot(); !sameCounts(got, exp) {
		b.Fatalf("the in-memory count differs from the records' (%d keys counted, %d with records)", len(got), len(exp))
	}
	return time.Duration(last.Load() - first.Load())
}

// installCount sets cfg's handler to count each record, in store or (store
// nil) in mem, as mode says, and to report the records done to finished.
func installCount(cfg *consumer.Config, mode costMode, store *Store, mem *mapCount, finished func(n int)) {
	if mode.batch {
		h := consumer.BatchHandler(mem.countBatch)
		if store != nil {
			h = store.BatchHandler(countBatch)
		}
		cfg.BatchHandler = func(ctx context.Context, batch []*kafka.Message) []error {
			res := h(ctx, batch)
			ok := len(batch)
			for _, err := range res {
				if err != nil {
					ok--
				}
			}
			finished(ok)
			return res
		}
		return
	}
	h := consumer.Handler(mem.count)
	if store != nil {
		h = store.Handler(count)
	}
	cfg.Handler = func(ctx context.Context, m *kafka.Message) error {
		if err := h(ctx, m); err != nil {
			return err
		}
		finished(1)
		return nil
	}
}

// checkChangelogCounts restores store's changelog of "events" and
// compares its counts with exp, each key's number of records.
func checkChangelogCounts(b *testing.B, store *Store, exp map[string]int) {
	b.Helper()
	table, err := restoreFull(b.Context(), store, store.Changelog("events"))
	if err != nil {
		b.Fatal(err)
	}
	got := make(map[string]int, table.Len())
	for e := range table.All() {
		got[string(e.Key)], _ = strconv.Atoi(string(e.Value))
	}
	if !sameCounts(got, exp) {
		b.Fatalf("the changelog's counts differ from the records' (%d keys counted, %d with records)", len(got), len(exp))
	}
}

// memberConfig is the harness's member settings (group.start) without a
// handler.
func memberConfig(groupName, brokers string) consumer.Config {
	cfg := consumer.DefaultConfig()
	cfg.Group, cfg.Topics, cfg.MemberID = groupName, []string{"events"}, "a"
	cfg.Kafka = benchKafka(brokers)
	cfg.SessionTTL = 2 * time.Second
	cfg.DrainTimeout = 10 * time.Second
	cfg.FlushInterval = 100 * time.Millisecond
	cfg.CommitInterval = 200 * time.Millisecond
	cfg.RebalanceDebounce = 50 * time.Millisecond
	return cfg
}

// mapCount is count's arithmetic on a map in memory: the same decimal
// string per key, parsed and written back, under a lock because the
// member runs several keys at once.
type mapCount struct {
	mu     sync.Mutex
	counts map[string][]byte
}

func newMapCount() *mapCount { return &mapCount{counts: make(map[string][]byte)} }

func (c *mapCount) count(_ context.Context, m *kafka.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	if v, ok := c.counts[string(m.Key)]; ok {
		var err error
		if n, err = strconv.Atoi(string(v)); err != nil {
			return err
		}
	}
	c.counts[string(m.Key)] = []byte(strconv.Itoa(n + 1))
	return nil
}

func (c *mapCount) countBatch(ctx context.Context, batch []*kafka.Message) []error {
	res := make([]error, len(batch))
	for i, m := range batch {
		res[i] = c.count(ctx, m)
	}
	return res
}

func (c *mapCount) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k], _ = strconv.Atoi(string(v))
	}
	return out
}

func sameCounts(got, exp map[string]int) bool {
	if len(got) != len(exp) {
		return false
	}
	for k, n := range exp {
		if got[k] != n {
			return false
		}
	}
	return true
}
