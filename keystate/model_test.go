package keystate_test

// The model: one input partition whose records set or delete the state of a
// few keys, and its changelog partition. Members own adjacent hash ranges
// covering the whole space, each under a fencing token that grows with
// every grant. An owner runs its range's records in offset order, skipping
// those the ledger has completed (flushed) and those the skip rule says it
// applied already; it appends each change at once and completes the record
// in its ledger at its next flush. Random steps produce records, run them,
// flush, hand ranges off, crash owners, turn owners into stale members (a
// member that lost its range and still runs records, its appends landing
// late or never), split and merge ranges, have owners read their changelog
// tail (Observe), and compact the changelog. Every new owner restores from
// the changelog as it is: from its start, or from a copy of the range a
// member kept when it handed the range off or split it (the disk store's
// copies) and the changelog from where that member had read it.
//
// A change's value lists the records that made it since the key's last
// deletion, each as offset#token: a single in-order application of the
// key's records gives exactly their offsets in order, so a record applied
// twice or left out shows, and the token tells apart the states two members
// built from the same records. The checks: every restored key is such an
// application up to its applied offset; a restore holds, per key, at least
// the offset the range's previous owner held, and where that owner wrote
// the key itself, the same state at that offset; and at the end, after every stale member stopped and compaction
// of the whole changelog, a restore of the whole space gives exactly the
// owners' state.
//
// Compaction stands for Kafka's log cleaner under the settings docs/state.md
// asks for: it removes a record superseded by a later one of its key only in
// the part of the changelog every owner has read (min.compaction.lag.ms
// longer than an owner takes to read and repair), and a tombstone only once
// no stale member runs and the ledger has completed every record of its key
// up to its offset (delete.retention.ms longer than both take). A copy
// whose reading stopped before a tombstone compaction removes is dropped:
// a member uses a copy only while it is younger than delete.retention.ms.

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/keyshare/keyshare/keystate"
	"github.com/keyshare/keyshare/ledger"
)

// chooser supplies a run's choices: rapid draws, or a seeded generator.
type chooser interface {
	intn(n int, label string) int // a value in [0, n); n >= 1
}

type rapidChooser struct{ t *rapid.T }

func (c rapidChooser) intn(n int, label string) int { return rapid.IntRange(0, n-1).Draw(c.t, label) }

type randChooser struct{ r *rand.Rand }

func (c randChooser) intn(n int, _ string) int { return c.r.IntN(n) }

// fataler is what the world needs of *testing.T and *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

type input struct {
	off int64
	key string
	del bool
}

// record is one changelog record as a broker holds it.
type record struct {
	seq     int
	key     []byte
	value   []byte
	null    bool
	headers []keystate.Header
}

type member struct {
	name      string
	fence     int64
	table     *keystate.Table
	pos       int64            // the offset its fetcher reads next
	unflushed []int64          // records it ran (or skipped) since its last flush
	tail      int              // the changelog seq it has read up to
	queue     []keystate.Entry // a stale member's appends not landed yet
	// done is, for a stale member, the ledger as it last read it: it
	// started its range from the ledger then.
	done map[int64]bool
}

type world struct {
	t       fataler
	c       chooser
	keys    []string
	input   []input
	done    map[int64]bool // completed in the ledger
	owners  []*member      // by range, adjacent, covering the space
	stale   []*member
	copies  []*member // tables former owners kept, each read up to its tail
	log     []record
	seq     int
	fence   int64
	members int
	trace   []string
}

var keyPool = []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"}

func newWorld(t fataler, c chooser) *world {
	w := &world{t: t, c: c, done: map[int64]bool{}}
	for _, k := range keyPool {
		if c.intn(2, "use key "+k) == 0 {
			w.keys = append(w.keys, k)
		}
	}
	if len(w.keys) == 0 {
		w.keys = keyPool[:1]
	}
	w.owners = []*member{w.grant(ledger.Full)}
	return w
}

func (w *world) logf(format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf(format, args...))
}

func (w *world) fatalf(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("%s\nhistory:\n  %s", fmt.Sprintf(format, args...), strings.Join(w.trace, "\n  "))
}

// grant makes a new member the owner of r: it restores r's table, from
// the changelog or from a copy that holds r.
func (w *world) grant(r ledger.HashRange) *member {
	w.members++
	w.fence++
	m := &member{name: fmt.Sprintf("m%d", w.members), fence: w.fence}
	if cp := w.copyOf(r); cp != nil && w.c.intn(2, "restore from a copy") == 0 {
		m.table = w.restoreFrom(cp, r, m.fence)
		w.logf("%s restores %s under fence %d from a copy read to %d: %d keys", m.name, r, m.fence, cp.tail, m.table.Len())
	} else {
		m.table = w.restore(r, m.fence)
		w.logf("%s restores %s under fence %d: %d keys", m.name, r, m.fence, m.table.Len())
	}
	m.tail = w.seq
	return m
}

// copyOf returns a kept copy that holds all of r, and drops the copies
// that overlap r: the member that takes r writes r's states over them.
func (w *world) copyOf(r ledger.HashRange) *member {
	var found *member
	w.copies = slices.DeleteFunc(w.copies, func(cp *member) bool {
		in := cp.table.Range().Intersect(r)
		if in == r {
			found = cp
		}
		return !in.Empty()
	})
	return found
}

// restore reads the whole changelog into a table of r for a grant under
// fence and appends its repairs.
func (w *world) restore(r ledger.HashRange, fence int64) *keystate.Table {
	w.t.Helper()
	rs, err := keystate.NewRestore(r, keystate.DefaultConfig())
	if err != nil {
		w.fatalf("NewRestore: %v", err)
	}
	return w.restoreTail(rs, r, fence, 0)
}

// restoreFrom restores r from cp's copy and the changelog from cp's tail.
func (w *world) restoreFrom(cp *member, r ledger.HashRange, fence int64) *keystate.Table {
	w.t.Helper()
	slots := keystate.NewMemorySlots()
	for e, err := range cp.table.All() {
		if err != nil {
			w.fatalf("All: %v", err)
		}
		if r.Contains(hashOf(string(e.Key))) {
			if err := slots.Set(e); err != nil {
				w.fatalf("Set: %v", err)
			}
		}
	}
	t, err := keystate.OpenTable(r, keystate.DefaultConfig(), slots)
	if err != nil {
		w.fatalf("OpenTable: %v", err)
	}
	return w.restoreTail(keystate.RestoreOn(t), r, fence, cp.tail)
}

// restoreTail feeds rs the changelog from seq from, and appends the
// repairs.
func (w *world) restoreTail(rs *keystate.Restore, r ledger.HashRange, fence int64, from int) *keystate.Table {
	w.t.Helper()
	for _, rec := range w.log {
		if rec.seq < from {
			continue
		}
		e, err := keystate.Decode(rec.key, rec.value, rec.null, rec.headers)
		if err != nil {
			w.fatalf("Decode of changelog record %d: %v", rec.seq, err)
		}
		if err := rs.Add(e); err != nil {
			w.fatalf("Add: %v", err)
		}
	}
	t, repairs, err := rs.Table(fence)
	if err != nil {
		w.fatalf("Table: %v", err)
	}
	for _, e := range repairs {
		w.logf("  restore repairs %s", show(e))
		w.append(e)
	}
	w.checkChains("restored "+r.String(), t)
	return t
}

// entry is key's state in t.
func (w *world) entry(t *keystate.Table, key []byte) (keystate.Entry, bool) {
	w.t.Helper()
	e, ok, err := t.Entry(key)
	if err != nil {
		w.fatalf("Entry: %v", err)
	}
	return e, ok
}

func (w *world) append(e keystate.Entry) {
	rec := record{seq: w.seq, key: bytes.Clone(e.Key), null: e.Deleted, headers: keystate.Headers(e)}
	if !e.Deleted {
		rec.value = bytes.Clone(e.Value)
	}
	w.log = append(w.log, rec)
	w.seq++
}

func show(e keystate.Entry) string {
	if e.Deleted {
		return fmt.Sprintf("%s deleted @%d/f%d", e.Key, e.Applied, e.Fence)
	}
	return fmt.Sprintf("%s=%q @%d/f%d", e.Key, e.Value, e.Applied, e.Fence)
}

func hashOf(key string) uint32 { return ledger.Hash([]byte(key), 0) }

// run has m run the next record of its range it has to, if any. A stale
// member knows nothing of the ledger's progress after it lost the range.
func (w *world) run(m *member, stale bool) bool {
	done := w.done
	if stale {
		done = m.done
	}
	for _, in := range w.input[m.pos:] {
		m.pos = in.off + 1
		if !m.table.Range().Contains(hashOf(in.key)) || done[in.off] {
			continue
		}
		m.unflushed = append(m.unflushed, in.off)
		k := []byte(in.key)
		if seen, _ := m.table.Seen(k, in.off); seen {
			w.logf("%s skips %d (%s): applied already", m.name, in.off, in.key)
			return true
		}
		var e keystate.Entry
		var err error
		if in.del {
			e, err = m.table.Delete(k, in.off, m.fence)
		} else {
			old, _, _ := m.table.Get(k)
			e, err = m.table.Put(k, fmt.Appendf(bytes.Clone(old), "%d#%d;", in.off, m.fence), in.off, m.fence)
		}
		if err != nil {
			w.fatalf("%s runs %d: %v", m.name, in.off, err)
		}
		if stale {
			m.queue = append(m.queue, e)
			w.logf("%s (stale) runs %d: %s, in flight", m.name, in.off, show(e))
		} else {
			w.append(e)
			w.logf("%s runs %d: %s", m.name, in.off, show(e))
		}
		return true
	}
	return false
}

func (w *world) flush(m *member) {
	for _, off := range m.unflushed {
		w.done[off] = true
	}
	m.unflushed = nil
}

// observe has owner m read its changelog tail and append the repairs.
func (w *world) observe(m *member) {
	for ; m.tail < w.seq; m.tail++ {
		rec := w.log[w.indexOf(m.tail)]
		e, err := keystate.Decode(rec.key, rec.value, rec.null, rec.headers)
		if err != nil {
			w.fatalf("Decode: %v", err)
		}
		before, _ := w.entry(m.table, e.Key)
		fix, ok, err := m.table.Observe(e, m.fence)
		if err != nil {
			w.fatalf("Observe: %v", err)
		}
		switch after, _ := w.entry(m.table, e.Key); {
		case ok:
			w.logf("%s observes %s, repairs %s", m.name, show(e), show(fix))
			w.append(fix)
		case after.Applied != before.Applied || after.Fence != before.Fence:
			w.logf("%s observes %s, adopts it", m.name, show(e))
		}
	}
}

// indexOf finds the record at seq; compaction leaves holes, so an owner's
// tail, which is past every hole it read, always finds one.
func (w *world) indexOf(seq int) int {
	i, ok := slices.BinarySearchFunc(w.log, seq, func(r record, s int) int { return r.seq - s })
	if !ok {
		w.fatalf("changelog record %d compacted before an owner read it", seq)
	}
	return i
}

// TestModel runs random histories (see the top of this file).
func TestModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := newWorld(t, rapidChooser{t})
		for range rapid.IntRange(20, 200).Draw(t, "steps") {
			w.step()
		}
		w.finish()
	})
}

// TestModelSwitchOffs shows that the model test can fail: with any rule
// switched off, one of the first histories breaks a check.
func TestModelSwitchOffs(t *testing.T) {
	for _, rule := range []string{"skip", "fence", "repair"} {
		t.Run(rule, func(t *testing.T) {
			defer keystate.SwitchOff(rule)()
			for seed := range uint64(2000) {
				msg, _ := runSeed(seed)
				if msg != "" {
					first, _, _ := strings.Cut(msg, "\nhistory:")
					t.Logf("with %s off, seed %d fails: %s", rule, seed, first)
					return
				}
			}
			t.Fatalf("with the %s rule off, no history of 2000 failed a check", rule)
		})
	}
}

// recorder is a fataler that stops the run with its message.
type recorder struct{ msg string }

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(r)
}

// runSeed runs one history from seed and returns the failed check's
// message, or "", and the history.
func runSeed(seed uint64) (msg string, trace []string) {
	rec := &recorder{}
	defer func() {
		if p := recover(); p != nil {
			if p != rec {
				panic(p)
			}
			msg = rec.msg
		}
	}()
	c := randChooser{rand.New(rand.NewPCG(seed, 0))}
	w := newWorld(rec, c)
	defer func() { trace = w.trace }()
	for range 20 + c.intn(181, "steps") {
		w.step()
	}
	w.finish()
	return "", nil
}

// TestModelSeeds runs many longer histories than rapid draws, and checks
// that they reach the cases the rules are for.
func TestModelSeeds(t *testing.T) {
	seen := map[string]int{}
	for seed := range uint64(3000) {
		msg, trace := runSeed(seed)
		if msg != "" {
			t.Fatalf("seed %d: %s", seed, msg)
		}
		for _, line := range trace {
			for _, event := range modelEvents {
				if strings.Contains(line, event) {
					seen[event]++
				}
			}
		}
	}
	t.Logf("events over 3000 histories: %v", seen)
	for _, event := range modelEvents {
		if seen[event] == 0 {
			t.Errorf("no history had %q", event)
		}
	}
}

// modelEvents are the trace lines of the cases the rules are for.
var modelEvents = []string{
	"skips",                 // the skip rule after a crash re-run
	"(stale) runs",          // a member running on after it lost its range
	"append lands",          // ... whose change lands late
	"repairs",               // an owner or a restore repairing a late change
	"adopts",                // an owner taking a stale member's lead
	"removes the tombstone", // compaction removing a tombstone
	"splits",                // a split
	"too, under fence",      // a split kept in one process
	"takes",                 // a merge
	"from a copy",           // a restore from a member's own copy
}

// byteChooser reads a run's choices from fuzz input; when the input is
// used up every choice is 0.
type byteChooser struct{ data []byte }

func (c *byteChooser) intn(n int, _ string) int {
	v := 0
	for range 2 {
		if len(c.data) > 0 {
			v = v<<8 | int(c.data[0])
			c.data = c.data[1:]
		}
	}
	return v % n
}

// FuzzModel runs the model on histories drawn from the fuzzer's bytes.
func FuzzModel(f *testing.F) {
	for seed := range uint64(8) {
		r := rand.New(rand.NewPCG(seed, 1))
		b := make([]byte, 600)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &byteChooser{data: data}
		w := newWorld(t, c)
		for len(c.data) > 0 && len(w.trace) < 2000 {
			w.step()
		}
		w.finish()
	})
}
