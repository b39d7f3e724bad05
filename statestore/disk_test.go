package statestore

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/keyshare/keyshare/keystate"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/testutil"
)

// diskStoreFor is a Store with only its disk store, in dir, for the tests
// of disk.go and copies.go, which need no broker.
func diskStoreFor(t *testing.T, dir string) *Store {
	t.Helper()
	s := &Store{cfg: Config{Group: "g", Dir: dir}.withDefaults(), log: testutil.Logger(t), held: make(grants)}
	d, err := openDisk(dir, "g", 1<<20, s.log)
	if err != nil {
		t.Fatal(err)
	}
	s.disk = d
	if err := s.loadCopies(); err != nil {
		t.Fatal(err)
	}
	return s
}

var (
	lower = ledger.HashRange{Lo: 0, Hi: 1 << 31}
	upper = ledger.HashRange{Lo: 1 << 31, Hi: ledger.HashSpace}
)

// keyIn returns a key whose hash is in r; i tells keys apart.
func keyIn(r ledger.HashRange, i int) []byte {
	for n := 0; ; n++ {
		k := []byte("key-" + strings.Repeat("x", i) + "-" + string(rune('a'+n%26)) + strings.Repeat("y", n/26))
		if r.Contains(ledger.Hash(k, 0)) {
			return k
		}
	}
}

// TestDiskSlots: a range's states on disk are read back as written, and
// one range's span holds none of another range's, partition's or topic's
// keys.
func TestDiskSlots(t *testing.T) {
	s := diskStoreFor(t, t.TempDir())
	defer s.disk.close()
	p0, p1, other := partitionKey{"events", 0}, partitionKey{"events", 1}, partitionKey{"events2", 0}
	a, b := keyIn(lower, 1), keyIn(upper, 2)
	want := []keystate.Entry{
		{Key: a, Value: []byte("va"), Applied: 7, Fence: 3},
		{Key: b, Deleted: true, Applied: 1 << 40, Fence: 1 << 33},
	}
	for _, pk := range []partitionKey{p0, p1, other} {
		for _, e := range want {
			if pk != p0 {
				e.Value = []byte("elsewhere")
			}
			slots := s.disk.slots(pk, ledger.Full)
			if err := slots.Set(e); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, r := range []ledger.HashRange{lower, upper} {
		tb, err := keystate.OpenTable(r, keystate.DefaultConfig(), s.disk.slots(p0, r))
		if err != nil {
			t.Fatal(err)
		}
		if tb.Len() != 1 {
			t.Fatalf("range %s of %v holds %d keys, want 1", r, p0, tb.Len())
		}
		got, ok, err := tb.Entry(want[i].Key)
		if err != nil || !ok || got.Deleted != want[i].Deleted || got.Applied != want[i].Applied || got.Fence != want[i].Fence || string(got.Value) != string(want[i].Value) {
			t.Fatalf("key %s reads back as %+v, %v, %v; want %+v", want[i].Key, got, ok, err, want[i])
		}
	}
	if err := s.disk.clear(p0, lower); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.disk.slots(p0, ledger.Full).Get(a); ok {
		t.Fatal("clear left a key of the range")
	}
	for _, pk := range []partitionKey{p1, other} {
		if e, ok, _ := s.disk.slots(pk, ledger.Full).Get(a); !ok || string(e.Value) != "elsewhere" {
			t.Fatalf("clear of range %s of %v took %v's key", lower, p0, pk)
		}
	}
	if _, ok, _ := s.disk.slots(p0, ledger.Full).Get(b); !ok {
		t.Fatal("clear of the lower range took a key of the upper")
	}
}

// TestDiskDamage: a damaged state is an error that names the key and what
// to do; a Dir of another group, or one a running Store holds, is refused.
func TestDiskDamage(t *testing.T) {
	dir := t.TempDir()
	s := diskStoreFor(t, dir)
	pk := partitionKey{"events", 0}
	k := keyIn(ledger.Full, 1)
	slots := s.disk.slots(pk, ledger.Full)
	if err := s.disk.db.Set(slots.key(k), []byte{7}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, _, err := slots.Get(k); err == nil || !strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), string(k)) {
		t.Fatalf("Get of a damaged state: %v", err)
	}
	if _, err := openDisk(dir, "g", 1<<20, s.log); err == nil {
		t.Fatal("a second store opened the Dir a running one holds")
	}
	s.disk.close()
	if _, err := openDisk(dir, "other", 1<<20, s.log); err == nil || !strings.Contains(err.Error(), `holds the state of group "g"`) {
		t.Fatalf("open of group g's Dir for group other: %v", err)
	}
}

// TestCopies: the copies a member keeps cover a new grant only when they
// hold all of its range, young enough and not spoiled; a grant takes its
// range out of them and leaves the rest; and a new start keeps the
// recorded copies younger than CopyMaxAge and clears every state none of
// them holds.
func TestCopies(t *testing.T) {
	dir := t.TempDir()
	s := diskStoreFor(t, dir)
	pk := partitionKey{"events", 0}
	now := time.Now()
	s.copies = []*copyRange{
		{pk: pk, rng: lower, through: 40, at: now},
		{pk: pk, rng: upper, through: 25, at: now},
	}
	if from, ok := s.cover(ledger.Full, copyParts(s.copies)); !ok || from != 25 {
		t.Fatalf("two young copies of the halves cover the whole range from %d, %v; want from 25", from, ok)
	}
	if _, ok := s.cover(ledger.Full, copyParts(s.copies[:1])); ok {
		t.Fatal("the lower half's copy covers the whole range")
	}
	old := []copyRange{{pk: pk, rng: lower, through: 40, at: now.Add(-s.cfg.CopyMaxAge)}}
	if _, ok := s.cover(lower, old); ok {
		t.Fatal("a copy CopyMaxAge old covers its range")
	}
	spoiled := &grant{spoiled: true}
	if _, ok := s.cover(lower, []copyRange{{pk: pk, rng: lower, from: spoiled}}); ok {
		t.Fatal("the copy of a spoiled grant covers its range")
	}

	// A grant of the middle of the space takes it out of both copies.
	mid := ledger.HashRange{Lo: 1 << 30, Hi: 3 << 30}
	taken := s.takeCopiesLocked(&grant{topic: pk.topic, partition: pk.partition, rng: mid})
	if from, ok := s.cover(mid, taken); !ok || from != 25 {
		t.Fatalf("the parts taken cover the middle from %d, %v", from, ok)
	}
	var left []ledger.HashRange
	for _, c := range s.copies {
		left = append(left, c.rng)
	}
	if len(left) != 2 || left[0] != (ledger.HashRange{Lo: 0, Hi: 1 << 30}) || left[1] != (ledger.HashRange{Lo: 3 << 30, Hi: ledger.HashSpace}) {
		t.Fatalf("copies left: %v", left)
	}

	// A new start keeps what was recorded and clears the rest.
	inLeft, inMid := keyIn(left[0], 1), keyIn(mid, 2)
	for _, k := range [][]byte{inLeft, inMid} {
		if err := s.disk.slots(pk, ledger.Full).Set(keystate.Entry{Key: k, Value: []byte("v"), Applied: 1, Fence: 1}); err != nil {
			t.Fatal(err)
		}
	}
	s.disk.close()
	s = diskStoreFor(t, filepath.Clean(dir))
	defer s.disk.close()
	if len(s.copies) != 2 {
		t.Fatalf("a new start found %d copies, want the 2 left", len(s.copies))
	}
	if _, ok, _ := s.disk.slots(pk, ledger.Full).Get(inLeft); !ok {
		t.Fatal("a new start cleared a key a copy holds")
	}
	if _, ok, _ := s.disk.slots(pk, ledger.Full).Get(inMid); ok {
		t.Fatal("a new start kept a key no copy holds")
	}
}

func copyParts(cs []*copyRange) []copyRange {
	var out []copyRange
	for _, c := range cs {
		out = append(out, *c)
	}
	return out
}

// TestDiskBound: with the state on disk, a change past Table.MaxBytes is
// an error, as in memory.
func TestDiskBound(t *testing.T) {
	s := diskStoreFor(t, t.TempDir())
	defer s.disk.close()
	tb, err := keystate.OpenTable(ledger.Full, keystate.Config{MaxBytes: keystate.EntryOverhead + 16}, s.disk.slots(partitionKey{"events", 0}, ledger.Full))
	if err != nil {
		t.Fatal(err)
	}
	var me *keystate.MemoryError
	if _, err := tb.Put([]byte("k"), []byte(strings.Repeat("v", 64)), 1, 1); !errors.As(err, &me) {
		t.Fatalf("a change past MaxBytes on disk: %v", err)
	}
	if tb.Len() != 0 {
		t.Fatal("the refused change was kept")
	}
}
