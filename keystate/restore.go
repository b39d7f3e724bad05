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
	// shadowed holds the keys whose state is not their last record read:
	// a losing entry of the key came after it.
	shadowed map[string]bool
}

// NewRestore starts the restore of range r in memory.
func NewRestore(r ledger.HashRange, cfg Config) (*Restore, error) {
	t, err := NewTable(r, cfg)
	if err != nil {
		return nil, err
	}
	return RestoreOn(t), nil
}

// RestoreOn goes on with a restore from the states t holds: a member's own
// copy of the range (OpenTable), which holds what a restore up to some
// offset of the changelog gives, and what the member appended since. Feed
// Add the entries from that offset on. Since the rule keeps per key the
// greatest entry, reading an entry twice changes nothing, so the copy may
// hold some of them already. docs/state.md argues why the copy's keys that
// have no entry from that offset on need no repair.
func RestoreOn(t *Table) *Restore {
	return &Restore{t: t, shadowed: map[string]bool{}}
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
	cur, had, err := r.t.slots.Get(e.Key)
	if err != nil {
		return err
	}
	if had && !supersedes(e, cur) {
		// The same change again is now the key's last record; a
		// losing one, a stale member's late write, is not.
		if e.Applied != cur.Applied || e.Fence != cur.Fence || e.Deleted != cur.Deleted {
			r.shadowed[string(e.Key)] = true
		} else {
			delete(r.shadowed, string(e.Key))
		}
		return nil
	}
	if err := r.t.store(owned(e), cur, had); err != nil {
		return err
	}
	delete(r.shadowed, string(e.Key))
	return nil
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
func (r *Restore) Table(fence int64) (*Table, []Entry, error) {
	var repairs []Entry
	if repairLosers {
		for k := range r.shadowed {
			cur, _, err := r.t.slots.Get([]byte(k))
			if err != nil {
				return nil, nil, err
			}
			if cur.Fence > fence {
				continue
			}
			cur.Fence = fence
			if err := r.t.slots.Set(cur); err != nil {
				return nil, nil, err
			}
			repairs = append(repairs, cur)
		}
	}
	t := r.t
	r.t, r.shadowed = nil, nil
	return t, repairs, nil
}
