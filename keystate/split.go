package keystate

import (
	"fmt"

	"github.com/keyshare/keyshare/ledger"
)

// A range that moves is restored by its new owner from the changelog (a
// table never crosses processes), so the only tables that split or merge
// are a member's own: when a range it holds is split, it keeps a part and
// drops the rest (Split), without reading the changelog again; when it
// gains the range next to one it holds, it restores the gained range and
// joins the two tables (Merge).

// Split cuts the table at hash at: t keeps the keys of [Lo, at) and the
// returned table holds those of [at, Hi), with the same MaxBytes. A member
// that keeps only one part drops the other.
func (t *Table) Split(at uint64) (*Table, error) {
	if at <= t.rng.Lo || at >= t.rng.Hi {
		return nil, fmt.Errorf("keystate: split of hash range %s at %d: want a hash inside the range, above its lower end", t.rng, at)
	}
	hi := &Table{rng: ledger.HashRange{Lo: at, Hi: t.rng.Hi}, maxBytes: t.maxBytes, slots: map[string]slot{}}
	for k, s := range t.slots {
		if uint64(ledger.Hash([]byte(k), 0)) >= at {
			delete(t.slots, k)
			hi.slots[k] = s
			n := size([]byte(k), s.value)
			t.bytes -= n
			hi.bytes += n
		}
	}
	t.rng.Hi = at
	return hi, nil
}

// Merge joins o, the table of the range next to t's (on either side), into
// t, which then holds both ranges; o is left empty. It refuses ranges that
// do not meet, and a sum over t's MaxBytes (a *MemoryError); t and o are
// then unchanged.
func (t *Table) Merge(o *Table) error {
	var joined ledger.HashRange
	switch {
	case t.rng.Hi == o.rng.Lo:
		joined = ledger.HashRange{Lo: t.rng.Lo, Hi: o.rng.Hi}
	case o.rng.Hi == t.rng.Lo:
		joined = ledger.HashRange{Lo: o.rng.Lo, Hi: t.rng.Hi}
	default:
		return fmt.Errorf("keystate: merge of hash ranges %s and %s: they do not meet; merge only neighbours", t.rng, o.rng)
	}
	if n := t.bytes + o.bytes; n > t.maxBytes {
		var key []byte
		for k := range o.slots {
			key = []byte(k)
			break
		}
		return &MemoryError{Range: joined, Key: key, Size: n, MaxBytes: t.maxBytes}
	}
	for k, s := range o.slots {
		t.slots[k] = s
	}
	t.bytes += o.bytes
	t.rng = joined
	o.slots, o.bytes = map[string]slot{}, 0
	return nil
}
