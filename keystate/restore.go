package keystate

import "github.com/keyshare/keyshare/ledger"

// Restore builds the table of a hash range from its changelog partition,
// read from the start to its end offset: feed Add every entry in changelog
// order, then take Table. It keeps the entries whose key hash is in the
// range and, per key, the one the restore rule picks (the highest applied
// offset; on equal offsets the larger fencing token). A tombstone that wins
// leaves the key deleted with its applied offset.
//
// A Restore is not safe for concurrent use, and is spent by Table.
type Restore struct {
	t *Table
}

// NewRestore starts the restore of range r.
func NewRestore(r ledger.HashRange, cfg Config) (*Restore, error) {
	t, err := NewTable(r, cfg)
	if err != nil {
		return nil, err
	}
	return &Restore{t: t}, nil
}

// Add takes the next entry of the changelog. It passes over an entry whose
// key is outside the range, and returns a *MemoryError (the restore
// unchanged) when keeping the entry would cross MaxBytes: the range's state
// does not fit, and running the range without it would be wrong.
func (r *Restore) Add(e Entry) error {
	if e.Key == nil {
		return ErrNullKey
	}
	if !r.t.rng.Contains(ledger.Hash(e.Key, 0)) {
		return nil
	}
	cur, had := r.t.slots[string(e.Key)]
	if had && !supersedes(e, cur) {
		// The same change again is now the key's last record; a
		// losing one, a stale member's late write, is not.
		if sh := e.Applied != cur.applied || e.Fence != cur.fence || e.Deleted != cur.deleted; sh != cur.shadowed {
			cur.shadowed = sh
			r.t.slots[string(e.Key)] = cur
		}
		return nil
	}
	return r.t.store(e.Key, slotOf(e), cur, had)
}

// Table returns the restored table, and the entries to append again before
// the range's records run: those of keys whose winning entry is not their
// last record in the changelog (a stale member's change landed after it),
// which compaction, keeping only a key's last record, would lose. A repair
// is the winning state under fence, the token of the grant the restore is
// for (so that, per key, the entries under one token never go back in
// applied offset: Observe relies on it); the table holds it so. A key
// written under a token above fence gets no repair: a later owner holds
// the range.
func (r *Restore) Table(fence int64) (*Table, []Entry) {
	var repairs []Entry
	for k, s := range r.t.slots {
		if s.shadowed && repairLosers && s.fence <= fence {
			s.fence = fence
			repairs = append(repairs, s.entry([]byte(k)))
		}
		if s.shadowed {
			s.shadowed = false
			r.t.slots[k] = s
		}
	}
	t := r.t
	r.t = nil
	return t, repairs
}
