package consumer

// The model of blocked keys: one member's pipeline with no I/O — its real
// filter and dispatch, scheduler, shelves and ledger states, on an
// in-memory log (logFetcher) and a clock the test moves. Workers are the
// test's steps: a step takes the head record of a ready key (or, in batch
// mode, a batch) from the scheduler, another runs and finishes one key's
// work. Keys are poisoned and healed at random: a poisoned key's work does
// not finish, so the key blocks, its records are shelved, and other keys
// move on. Every run is checked: a key's records run in offset order, and
// no record runs twice. At the end the poisoned keys are healed one by
// one, and before each the keys not poisoned must run all their records
// while the poisoned ones stay blocked; then every record must have run,
// and each range's watermark must be at the end of the log.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"
	"pgregory.net/rapid"

	"github.com/keyshare/keyshare/consumer/internal/schedule"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// logFetcher delivers one partition's log from a position that seeks move.
type logFetcher struct {
	log   []*kafka.Message // by offset
	pos   int              // index in log of the next record to deliver
	seeks int
}

func (f *logFetcher) IncrementalAssign([]kafka.TopicPartition) error   { return nil }
func (f *logFetcher) IncrementalUnassign([]kafka.TopicPartition) error { return nil }
func (f *logFetcher) Pause([]kafka.TopicPartition) error               { return nil }
func (f *logFetcher) Resume([]kafka.TopicPartition) error              { return nil }
func (f *logFetcher) GetWatermarkOffsets(string, int32) (int64, int64, error) {
	return 0, -1, nil
}
func (f *logFetcher) QueryWatermarkOffsets(string, int32, int) (int64, int64, error) {
	return 0, 0, nil
}

func (f *logFetcher) SeekPartitions(parts []kafka.TopicPartition) ([]kafka.TopicPartition, error) {
	for _, p := range parts {
		f.seeks++
		f.pos, _ = slices.BinarySearchFunc(f.log, int64(p.Offset), func(m *kafka.Message, o int64) int {
			return int(int64(m.TopicPartition.Offset) - o)
		})
	}
	return parts, nil
}

func (f *logFetcher) Poll(int) kafka.Event {
	if f.pos == len(f.log) {
		return nil
	}
	f.pos++
	return f.log[f.pos-1]
}

var _ fetcher = (*logFetcher)(nil)

// running is one key's work a step took from the scheduler and has not
// finished: its record, or its records in a batch. A batch is taken as a
// whole and each of its keys finishes on its own, as runBatch releases the
// keys of a batch while a failed record holds its own.
type running struct {
	key  string // the records' key ("" for a null key)
	k    jobKey // the key in the scheduler
	b    *batch // the batch the records are in, or nil for one record
	jobs []*job
}

type blockedModel struct {
	t       *rapid.T
	p       *pipeline
	f       *logFetcher
	clock   time.Time
	batches bool
	// The scheduler the steps drive, by its own type: single (batches
	// false) or batcher.
	single  *schedule.Scheduler[jobKey, *job]
	batcher *schedule.Batcher[jobKey, *job]
	keys    []string
	next    int64 // the offset of the next record produced
	// poisoned keys' work does not finish (only true values)
	poisoned map[string]bool
	running  []running
	ran      map[int64]bool   // offsets run
	last     map[string]int64 // per key, the offset run last
	trace    []string
}

func newBlockedModel(t *rapid.T) *blockedModel {
	m := &blockedModel{
		t: t, f: &logFetcher{}, clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		batches: rapid.Bool().Draw(t, "batches"), poisoned: map[string]bool{},
		ran: map[int64]bool{}, last: map[string]int64{},
	}
	for i := range rapid.IntRange(2, 4).Draw(t, "keys") {
		m.keys = append(m.keys, fmt.Sprintf("k%d", i))
	}
	cfg := DefaultConfig()
	cfg.MaxInFlight = rapid.IntRange(2, 12).Draw(t, "max in flight")
	cfg.MaxQueuedPerKey = rapid.IntRange(1, 4).Draw(t, "max queued per key")
	c := &Consumer{cfg: cfg, log: hclog.NewNullLogger()}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p := &pipeline{c: c, kc: m.f, ctx: ctx, stop: cancel, log: c.log,
		space: make(chan struct{}, 1), flushCh: make(chan struct{}, 1)}
	p.mu.cond = sync.NewCond(&p.mu.Mutex)
	p.mu.rangeTable = newRangeTable()
	p.mu.jobs = make(map[tp]*jobList)
	p.mu.halted = make(map[tp]bool)
	p.mu.shelves = make(map[tp]shelf)
	p.mu.load = newLoadTable(m.clock)
	p.mu.fetching, p.mu.heldKnown = true, true
	// No workers: the steps take records from the scheduler.
	clock := func() time.Time { return m.clock }
	if m.batches {
		m.batcher = schedule.NewBatcher[jobKey, *job](0, rapid.IntRange(1, 4).Draw(t, "batch size"), 0, nil)
		m.batcher.SetClock(clock)
		p.sched = m.batcher
	} else {
		m.single = schedule.New[jobKey, *job](0, nil)
		m.single.SetClock(clock)
		p.sched = m.single
	}
	// One range, or the space cut in two.
	cuts := []uint64{0, ledger.HashSpace}
	if rapid.Bool().Draw(t, "two ranges") {
		cuts = []uint64{0, uint64(rapid.Uint32Range(1, 1<<32-1).Draw(t, "cut")), ledger.HashSpace}
	}
	t0 := tp{Topic: "t"}
	for i := range len(cuts) - 1 {
		rs := rangeOf(0, cuts[i], cuts[i+1], schema.StateActive, 1, 0)
		st, err := ledger.NewState(rs.Record.Range(), rs.Entry, 0)
		if err != nil {
			t.Fatal(err)
		}
		w := &owned{rs: rs, st: st}
		p.mu.ranges[rs.Key] = w
		p.mu.byTP[t0] = append(p.mu.byTP[t0], w)
	}
	p.mu.assigned[t0], p.mu.pos[t0] = true, 0
	m.p = p
	return m
}

// fatalf fails the run with the last steps of its trace.
func (m *blockedModel) fatalf(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("%s\nlast steps:\n  %s", fmt.Sprintf(format, args...), strings.Join(m.trace[max(0, len(m.trace)-60):], "\n  "))
}

// produce appends a record of a drawn key (or a null key) to the log,
// sometimes after an offset that holds none.
func (m *blockedModel) produce() {
	m.next += int64(rapid.IntRange(0, 1).Draw(m.t, "gap"))
	topic := "t"
	msg := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Offset: kafka.Offset(m.next)}}
	if i := rapid.IntRange(0, len(m.keys)).Draw(m.t, "key"); i < len(m.keys) {
		msg.Key = []byte(m.keys[i])
	}
	m.f.log = append(m.f.log, msg)
	m.trace = append(m.trace, fmt.Sprintf("produce %s@%d", msg.Key, m.next))
	m.next++
}

// loop is one turn of the fetch loop (fetch.go): shelved keys that move
// again are fetched again, and below the in-flight bound one record is
// fetched.
func (m *blockedModel) loop() {
	if err := m.p.refetchShelved(); err != nil {
		m.fatalf("refetch: %v", err)
	}
	if m.p.backpressure() {
		m.trace = append(m.trace, "at the bound")
		return
	}
	if msg, ok := m.f.Poll(0).(*kafka.Message); ok {
		m.trace = append(m.trace, fmt.Sprintf("fetch %s@%d", msg.Key, msg.TopicPartition.Offset))
		m.p.handle([]*kafka.Message{msg}, m.clock)
	}
	m.p.mu.Lock()
	inflight := m.p.mu.inflight
	m.p.mu.Unlock()
	if inflight > m.p.c.cfg.MaxInFlight {
		m.fatalf("%d records in flight, bound %d", inflight, m.p.c.cfg.MaxInFlight)
	}
}

// start takes work from the scheduler as a worker would.
func (m *blockedModel) start() {
	if !m.batches {
		k, j, _, ok := m.single.Next()
		if !ok {
			return
		}
		m.running = append(m.running, running{key: string(j.m.Key), k: k, jobs: []*job{j}})
		m.trace = append(m.trace, fmt.Sprintf("start %s@%d", j.m.Key, j.o))
		return
	}
	b := m.batcher.TakeBatch()
	for _, k := range b.Keys() {
		r := running{key: k.key, b: b, k: k}
		for _, j := range b.Jobs() {
			if j.key == k {
				r.jobs = append(r.jobs, j)
				m.trace = append(m.trace, fmt.Sprintf("start %s@%d in a batch", j.m.Key, j.o))
			}
		}
		m.running = append(m.running, r)
	}
}

// finish ends the i-th running work as a worker does: the records run
// (checked here: a key's records run in offset order, and once), their
// outcomes go to the ledger, then the key is free.
func (m *blockedModel) finish(i int) {
	r := m.running[i]
	m.running = slices.Delete(m.running, i, i+1)
	for _, j := range r.jobs {
		m.trace = append(m.trace, fmt.Sprintf("run %s@%d", j.m.Key, j.o))
		if m.ran[j.o] {
			m.fatalf("record %s@%d ran twice", j.m.Key, j.o)
		}
		m.ran[j.o] = true
		if j.m.Key != nil {
			k := string(j.m.Key)
			if last, ok := m.last[k]; ok && j.o < last {
				m.fatalf("key %s: record %d ran after %d", k, j.o, last)
			}
			m.last[k] = j.o
		}
		m.p.finish(j, j.ctx.Err() == nil)
		j.cancel()
	}
	if r.b != nil {
		r.b.Release(r.k, nil)
		return
	}
	m.single.Done(r.k)
}

// finishFree finishes the running work of keys not poisoned.
func (m *blockedModel) finishFree() {
	for i := 0; i < len(m.running); {
		if m.poisoned[m.running[i].key] {
			i++
			continue
		}
		m.finish(i)
	}
}

func (m *blockedModel) step() {
	switch rapid.IntRange(0, 6).Draw(m.t, "step") {
	case 0:
		for range rapid.IntRange(1, 8).Draw(m.t, "records") {
			m.produce()
		}
	case 1, 2:
		for range rapid.IntRange(1, 4).Draw(m.t, "turns") {
			m.loop()
		}
	case 3:
		m.start()
	case 4:
		var free []int
		for i, r := range m.running {
			if !m.poisoned[r.key] {
				free = append(free, i)
			}
		}
		if len(free) > 0 {
			m.finish(rapid.SampledFrom(free).Draw(m.t, "finish"))
		}
	case 5:
		m.clock = m.clock.Add(time.Duration(rapid.IntRange(1, 15).Draw(m.t, "tenths")) * 100 * time.Millisecond)
		m.trace = append(m.trace, "tick")
	case 6:
		k := rapid.SampledFrom(m.keys).Draw(m.t, "poison")
		if m.poisoned[k] {
			delete(m.poisoned, k)
		} else {
			m.poisoned[k] = true
		}
		m.trace = append(m.trace, fmt.Sprintf("poisoned %s: %v", k, m.poisoned[k]))
	}
}

// runUntil runs the member (fetch, start, finish what may finish, time
// passes) until done holds, or fails saying what.
func (m *blockedModel) runUntil(what string, done func() bool) {
	for range 20 * (len(m.f.log) + 10) {
		if done() {
			return
		}
		m.loop()
		m.start()
		m.finishFree()
		m.clock = m.clock.Add(200 * time.Millisecond)
	}
	m.fatalf("never: %s", what)
}

// ranAll reports whether every record of the log that keep selects ran.
func (m *blockedModel) ranAll(keep func(*kafka.Message) bool) bool {
	for _, msg := range m.f.log {
		if keep(msg) && !m.ran[int64(msg.TopicPartition.Offset)] {
			return false
		}
	}
	return true
}

// settle heals the poisoned keys one by one. Before each, the keys not
// poisoned must run all their records while the poisoned ones stay
// blocked (when the poisoned keys' records in memory leave the others room
// below MaxInFlight). Then every record must have run, and each range's
// watermark must be at the end of the log.
func (m *blockedModel) settle() {
	perKey := 1 + m.p.maxQueuedPerKey() // running, and queued
	if m.batches {
		perKey += m.batcher.MaxBatch() - 1
	}
	for _, k := range m.keys {
		if !m.poisoned[k] {
			continue
		}
		if len(m.poisoned)*perKey < m.p.c.cfg.MaxInFlight {
			m.trace = append(m.trace, "settle the keys not poisoned")
			m.runUntil("every record of the keys not poisoned runs", func() bool {
				return m.ranAll(func(msg *kafka.Message) bool { return !m.poisoned[string(msg.Key)] })
			})
		}
		delete(m.poisoned, k)
		m.trace = append(m.trace, fmt.Sprintf("poisoned %s: false", k))
	}
	m.trace = append(m.trace, "settle all")
	m.runUntil("every record runs", func() bool { return m.ranAll(func(*kafka.Message) bool { return true }) })
	// Fetch what is left (after a seek back, records that ran already):
	// nothing runs any more.
	for m.f.pos < len(m.f.log) {
		m.loop()
	}
	if !m.p.sched.Idle() || len(m.running) > 0 {
		m.fatalf("records queued after all ran")
	}
	for _, w := range m.p.mu.byTP[tp{Topic: "t"}] {
		if wm := w.st.Watermark(); wm != m.next {
			m.fatalf("range %s: watermark %d, want %d (the end of the log); pending %v", w.st.Range(), wm, m.next, w.st.Entry())
		}
	}
}

// TestBlockedKeysModel: blocked keys' records leave memory and come back,
// and a key still runs its records once each, in offset order.
func TestBlockedKeysModel(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		m := newBlockedModel(t)
		for range rapid.IntRange(20, 400).Draw(t, "steps") {
			m.step()
		}
		m.settle()
	})
}
