package ledger

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// pendingOf builds a set from (offset, flag) pairs; a dispatched offset's
// hash is its offset.
func pendingOf(t *testing.T, entries ...pendingEntry) *pendingSet {
	t.Helper()
	var p pendingSet
	for _, e := range entries {
		p.add(e.o, e.f, e.h)
	}
	return &p
}

func w(o int64) pendingEntry { return pendingEntry{o, waiting, 0} }
func d(o int64) pendingEntry { return pendingEntry{o, dispatched, uint32(o)} }

// checkBound fails if tombstones outgrow the live entries (see pendingSet).
func checkBound(t *testing.T, p *pendingSet) {
	t.Helper()
	if n := len(p.offs); n > 2*p.live+64 {
		t.Fatalf("%d slots (head %d) for %d live offsets: compaction did not run", n, p.head, p.live)
	}
	if p.head > len(p.offs) || (p.head < len(p.offs) && p.flags[p.head] == gone) {
		t.Fatalf("head %d of %d does not point at a live entry", p.head, len(p.offs))
	}
}

func TestPendingSet(t *testing.T) {
	t.Run("empty", func(t *testing.T) {
		var p pendingSet
		if _, ok := p.min(); ok || p.len() != 0 || p.list() != nil {
			t.Fatalf("empty set: min ok=%v len %d list %v", ok, p.len(), p.list())
		}
		if p.remove(3) {
			t.Fatal("remove(3) from an empty set = true")
		}
		if _, f := p.lookup(3); f != gone {
			t.Fatalf("lookup(3) in an empty set = flag %d", f)
		}
	})
	t.Run("add keeps order and flags", func(t *testing.T) {
		p := pendingOf(t, w(3), d(5), w(9))
		if got := p.list(); !slices.Equal(got, []int64{3, 5, 9}) {
			t.Fatalf("list = %v", got)
		}
		if m, ok := p.min(); !ok || m != 3 {
			t.Fatalf("min = %d, %v", m, ok)
		}
		if _, f := p.lookup(5); f != dispatched {
			t.Fatalf("lookup(5) flag = %d, want dispatched", f)
		}
		if i, f := p.lookup(9); f != waiting || p.offs[i] != 9 {
			t.Fatalf("lookup(9) = %d, flag %d", i, f)
		}
		if _, f := p.lookup(4); f != gone {
			t.Fatalf("lookup(4) flag = %d, want gone", f)
		}
	})
	t.Run("remove front trims head", func(t *testing.T) {
		p := pendingOf(t, d(1), d(2), d(3))
		if !p.remove(1) {
			t.Fatal("remove(1) = false")
		}
		if m, _ := p.min(); m != 2 || p.head != 1 || p.len() != 2 {
			t.Fatalf("after remove(1): min %d head %d len %d", m, p.head, p.len())
		}
		checkBound(t, p)
	})
	t.Run("remove middle leaves a tombstone", func(t *testing.T) {
		p := pendingOf(t, d(1), d(2), d(3))
		p.remove(2)
		if m, _ := p.min(); m != 1 || p.len() != 2 || !slices.Equal(p.list(), []int64{1, 3}) {
			t.Fatalf("after remove(2): min %d len %d list %v", m, p.len(), p.list())
		}
		if _, f := p.lookup(2); f != gone {
			t.Fatal("a removed offset is still found")
		}
		// Removing the front now skips the tombstone too.
		p.remove(1)
		if m, _ := p.min(); m != 3 || p.head != 2 {
			t.Fatalf("after remove(1): min %d head %d", m, p.head)
		}
	})
	t.Run("remove twice or absent", func(t *testing.T) {
		p := pendingOf(t, d(1), d(3))
		if p.remove(2) {
			t.Fatal("remove(2) of an absent offset = true")
		}
		p.remove(3)
		if p.remove(3) {
			t.Fatal("second remove(3) = true")
		}
		if p.len() != 1 {
			t.Fatalf("len = %d, want 1", p.len())
		}
	})
	t.Run("remove last resets and keeps the slices", func(t *testing.T) {
		p := pendingOf(t, d(1), d(2), d(3))
		c := cap(p.offs)
		for _, o := range []int64{2, 3, 1} {
			p.remove(o)
		}
		if len(p.offs) != 0 || p.head != 0 || cap(p.offs) != c {
			t.Fatalf("empty set: len %d head %d cap %d (was %d)", len(p.offs), p.head, cap(p.offs), c)
		}
		p.add(10, dispatched, 10)
		if m, _ := p.min(); m != 10 {
			t.Fatalf("min after reuse = %d", m)
		}
	})
	t.Run("compaction behind a stuck front", func(t *testing.T) {
		var p pendingSet
		p.add(0, dispatched, 0) // never removed
		for o := int64(1); o <= 1000; o++ {
			p.add(o, dispatched, uint32(o))
			if o > 1 { // complete the one before, never 0
				p.remove(o - 1)
			}
			checkBound(t, &p)
		}
		if m, _ := p.min(); m != 0 {
			t.Fatalf("min = %d, want the stuck 0", m)
		}
		if got := p.list(); !slices.Equal(got, []int64{0, 1000}) {
			t.Fatalf("list = %v, want [0 1000]", got)
		}
		if len(p.offs) > 2*p.live+65 {
			t.Fatalf("%d slots for %d live offsets", len(p.offs), p.live)
		}
		// Lookups still work after compaction moved the entries.
		if _, f := p.lookup(1000); f != dispatched {
			t.Fatal("lookup(1000) after compaction failed")
		}
		if i, _ := p.lookup(1000); p.hashes[i] != 1000 {
			t.Fatalf("hash of 1000 after compaction = %d", p.hashes[i])
		}
	})
	t.Run("memory stays bounded under a sliding window", func(t *testing.T) {
		// The usual pattern: a steady number of records in flight,
		// completed oldest first, so the set is never empty and the
		// front is trimmed on every removal. The trimmed slots must be
		// reclaimed too.
		var p pendingSet
		const window = 64
		for o := range int64(100_000) {
			p.add(o, dispatched, uint32(o))
			if o >= window {
				if !p.remove(o - window) {
					t.Fatalf("remove(%d) = false", o-window)
				}
			}
			checkBound(t, &p)
		}
		if p.live != window || cap(p.offs) > 4*(2*window+64) {
			t.Fatalf("live %d, capacity %d after 100,000 records through a window of %d", p.live, cap(p.offs), window)
		}
		if m, _ := p.min(); m != 100_000-window {
			t.Fatalf("min = %d", m)
		}
	})
	t.Run("filter copies", func(t *testing.T) {
		p := pendingOf(t, w(1), d(2), w(3), d(4))
		c := p.filter(func(_ int64, f uint8, _ uint32) bool { return f == waiting })
		if !slices.Equal(c.list(), []int64{1, 3}) {
			t.Fatalf("filter = %v", c.list())
		}
		c.remove(1)
		if _, f := p.lookup(1); f != waiting {
			t.Fatal("removing from the filtered copy changed the original")
		}
	})
	t.Run("entries and each skip tombstones", func(t *testing.T) {
		p := pendingOf(t, w(1), d(2), w(3))
		p.remove(2)
		want := []pendingEntry{w(1), w(3)}
		if got := p.entries(); !slices.Equal(got, want) {
			t.Fatalf("entries = %v, want %v", got, want)
		}
	})
}

// TestPendingSetModel checks pendingSet against a plain set under random
// adds and removes.
func TestPendingSetModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var p pendingSet
		model := map[int64]uint8{}
		next := int64(0)
		for range rapid.IntRange(0, 500).Draw(rt, "ops") {
			if len(model) == 0 || rapid.IntRange(0, 2).Draw(rt, "op") == 0 {
				next += int64(rapid.IntRange(0, 3).Draw(rt, "gap"))
				f := waiting + uint8(rapid.IntRange(0, 1).Draw(rt, "dispatched"))
				p.add(next, f, uint32(next))
				model[next] = f
				next++
				continue
			}
			o := next - 1 - int64(rapid.IntRange(0, int(next-1)).Draw(rt, "back"))
			_, in := model[o]
			if got := p.remove(o); got != in {
				rt.Fatalf("remove(%d) = %v, want %v", o, got, in)
			}
			delete(model, o)
			if n := len(p.offs); n > 2*p.live+64 {
				rt.Fatalf("%d slots (head %d) for %d live offsets", n, p.head, p.live)
			}
		}
		var want []int64
		for o := range model {
			want = append(want, o)
		}
		slices.Sort(want)
		if got := p.list(); !slices.Equal(got, want) {
			rt.Fatalf("list = %v, want %v", got, want)
		}
		if m, ok := p.min(); ok != (len(want) > 0) || (ok && m != want[0]) {
			rt.Fatalf("min = %d, %v; want %v", m, ok, want)
		}
		for o, f := range model {
			if _, got := p.lookup(o); got != f {
				rt.Fatalf("lookup(%d) flag %d, want %d", o, got, f)
			}
		}
	})
}

func TestExactUnion(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b []pendingEntry
		want bool
	}{
		{"both empty", nil, nil, true},
		{"dispatched in one", []pendingEntry{d(3)}, nil, true},
		{"dispatched in each", []pendingEntry{d(3)}, []pendingEntry{d(5)}, true},
		{"waiting in both", []pendingEntry{w(3)}, []pendingEntry{w(3)}, true},
		{"dispatched here, waiting there", []pendingEntry{d(3)}, []pendingEntry{w(3)}, true},
		{"waiting in the left only", []pendingEntry{w(3)}, nil, false},
		{"waiting in the right only", []pendingEntry{d(1)}, []pendingEntry{d(2), w(4)}, false},
		{"waiting after a common one", []pendingEntry{w(1), w(2)}, []pendingEntry{w(1)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pendingOf(t, tc.a...), pendingOf(t, tc.b...)
			if got := exactUnion(a, b); got != tc.want {
				t.Fatalf("exactUnion(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
			if got := exactUnion(b, a); got != tc.want {
				t.Fatalf("exactUnion(%v, %v) = %v, want %v", tc.b, tc.a, got, tc.want)
			}
		})
	}
	t.Run("tombstones are not offsets", func(t *testing.T) {
		a, b := pendingOf(t, d(1), w(2), d(3)), pendingOf(t, d(4))
		if exactUnion(a, b) {
			t.Fatal("waiting 2 only on the left: want false")
		}
		a.remove(2)
		a.remove(1)
		if !exactUnion(a, b) {
			t.Fatal("after removing 2: want true")
		}
	})
}
