package keystate

import (
	"bytes"
	"fmt"
	"iter"

	"github.com/keyshare/keyshare/ledger"
)

// Table is the state of the keys of one hash range: per key its value and
// the input offset and fencing token of the change that made it. A deleted
// key is kept without a value, for its applied offset (the skip rule); it
// counts its key's bytes and EntryOverhead against MaxBytes. The states
// live in the table's Slots; an error of theirs (a disk's) is returned as
// it is, the table's counts unchanged.
//
// A Table is not safe for concurrent use.
type Table struct {
	rng      ledger.HashRange
	maxBytes int64
	bytes    int64
	keys     int
	slots    Slots
}

// NewTable returns an empty table for range r in memory: the state of a
// range no change was ever recorded for. A range with history starts from
// a Restore.
func NewTable(r ledger.HashRange, cfg Config) (*Table, error) {
	return OpenTable(r, cfg, NewMemorySlots())
}

// OpenTable returns the table of range r on slots, which may hold states
// already: a member's own copy of the range, kept on its disk, which holds
// what a restore up to some changelog offset gives (RestoreOn goes on from
// there). It reads them all to count them, and refuses a state of a key
// outside r and states past MaxBytes (a *MemoryError).
func OpenTable(r ledger.HashRange, cfg Config, slots Slots) (*Table, error) {
	if err := r.Valid(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Table{rng: r, maxBytes: cfg.MaxBytes, slots: slots}
	for e, err := range slots.All() {
		if err != nil {
			return nil, err
		}
		if h := ledger.Hash(e.Key, 0); !r.Contains(h) {
			return nil, fmt.Errorf("keystate: the slots of hash range %s hold key %q of hash %d, outside it: they belong to another range", r, e.Key, h)
		}
		t.keys++
		t.bytes += size(e.Key, e.Value)
		if t.bytes > t.maxBytes {
			return nil, &MemoryError{Range: r, Key: e.Key, Size: t.bytes, MaxBytes: t.maxBytes}
		}
	}
	return t, nil
}

// Range is the hash range the table holds the keys of.
func (t *Table) Range() ledger.HashRange { return t.rng }

// Len is the number of keys the table knows, deleted ones included.
func (t *Table) Len() int { return t.keys }

// Bytes is what the table counts against MaxBytes.
func (t *Table) Bytes() int64 { return t.bytes }

// Get returns key's value, false if the key has none (never set, or
// deleted). The value is the table's: do not modify it.
func (t *Table) Get(key []byte) ([]byte, bool, error) {
	e, ok, err := t.slots.Get(key)
	if err != nil || !ok || e.Deleted {
		return nil, false, err
	}
	return e.Value, true, nil
}

// Applied returns the input offset of key's last change, deleted keys
// included; false if the table has none.
func (t *Table) Applied(key []byte) (int64, bool, error) {
	e, ok, err := t.slots.Get(key)
	return e.Applied, ok, err
}

// Seen is the skip rule: whether the record at offset has changed key's
// state already (offset <= the key's applied offset), so running it again
// would apply it twice. A member asks before it runs each record.
func (t *Table) Seen(key []byte, offset int64) (bool, error) {
	e, ok, err := t.slots.Get(key)
	return skipApplied && ok && offset <= e.Applied, err
}

// Entry returns key's last change as a changelog entry.
func (t *Table) Entry(key []byte) (Entry, bool, error) {
	return t.slots.Get(key)
}

// All yields every key's last change, in no particular order.
func (t *Table) All() iter.Seq2[Entry, error] { return t.slots.All() }

// Put sets key's value as the change made by the input record at applied,
// under fencing token fence, and returns the entry to append to the
// changelog. The table keeps a copy of value. It refuses (a *ChangeError,
// the table unchanged) a change the skip rule says was made already, one
// under a token below the key's (the caller has lost the range), a key
// outside the range, or a negative offset or token; and a change that
// would cross MaxBytes (a *MemoryError).
func (t *Table) Put(key, value []byte, applied, fence int64) (Entry, error) {
	if value == nil {
		value = []byte{} // nil is a deleted key's
	}
	return t.change(Entry{Key: key, Value: bytes.Clone(value), Applied: applied, Fence: fence})
}

// Delete removes key's value as the change made by the input record at
// applied, under fencing token fence, and returns the tombstone to append.
// The table keeps the key's applied offset. It refuses what Put refuses.
func (t *Table) Delete(key []byte, applied, fence int64) (Entry, error) {
	return t.change(Entry{Key: key, Deleted: true, Applied: applied, Fence: fence})
}

func (t *Table) change(e Entry) (Entry, error) {
	refuse := func(reason string) (Entry, error) {
		return Entry{}, &ChangeError{Key: e.Key, Applied: e.Applied, Fence: e.Fence, Reason: reason}
	}
	if e.Key == nil {
		return Entry{}, ErrNullKey
	}
	if e.Applied < 0 || e.Fence < 0 {
		return refuse("negative offset or fencing token")
	}
	if !t.rng.Contains(ledger.Hash(e.Key, 0)) {
		return refuse("key hash outside the table's range " + t.rng.String())
	}
	cur, ok, err := t.slots.Get(e.Key)
	if err != nil {
		return Entry{}, err
	}
	if ok && skipApplied && e.Applied <= cur.Applied {
		return refuse("at or below the key's applied offset " + itoa(cur.Applied) + " (ask Seen before running a record)")
	}
	if ok && e.Fence < cur.Fence {
		return refuse("below the key's fencing token " + itoa(cur.Fence) + ": a later owner of the range changed it, so this member has lost the range")
	}
	if err := t.store(e, cur, ok); err != nil {
		return Entry{}, err
	}
	return e, nil
}

// store sets e as its key's state in place of cur (when had), within
// MaxBytes.
func (t *Table) store(e, cur Entry, had bool) error {
	n := t.bytes + size(e.Key, e.Value)
	if had {
		n -= size(cur.Key, cur.Value)
	}
	if n > t.maxBytes {
		return &MemoryError{Range: t.rng, Key: e.Key, Size: n, MaxBytes: t.maxBytes}
	}
	if err := t.slots.Set(e); err != nil {
		return err
	}
	t.bytes = n
	if !had {
		t.keys++
	}
	return nil
}

// Observe takes an entry read from the changelog while the table's owner
// holds the range under token fence, after the table was restored, and
// keeps the table what a restore would give: mostly the owner's own
// appends coming back, but also a change appended late by a member that
// has lost the range (its append was in flight, or it was paused).
//
// An entry that wins under the restore rule replaces the key's state in
// the table, as a restore would take it: a stale member ahead of the owner
// on the key has run its records up to its offset, and the owner skips
// them now (Seen), as a new owner would after a restore; a later owner's
// entry makes the table refuse this member's changes to the key. Taking it
// can cross MaxBytes: a *MemoryError, the table unchanged.
//
// An entry that loses is still the key's last record, and compaction
// keeps only that: Observe then returns the key's state under fence, which
// the table now holds, for the owner to append again. An entry under the
// key's token and not above its offset was written before the table's (per
// key, the entries under one token never go back in offset: a change
// raises it, a repair repeats it under the repairer's token) and changes
// nothing, nor does one of a key outside the range.
//
// An operator's deletion of the key's state (a tombstone at its offset and
// token) is taken, and returned under fence for the owner to append: the
// deleter waits for that copy to know the owner holds the deletion before
// the group's records run again.
func (t *Table) Observe(e Entry, fence int64) (repair Entry, ok bool, err error) {
	if e.Key == nil || !t.rng.Contains(ledger.Hash(e.Key, 0)) {
		return Entry{}, false, nil
	}
	cur, had, err := t.slots.Get(e.Key)
	if err != nil {
		return Entry{}, false, err
	}
	switch {
	case had && deletes(e, cur) && cur.Fence <= fence:
		s := owned(e)
		s.Fence = fence
		if err := t.store(s, cur, had); err != nil {
			return Entry{}, false, err
		}
		return s, true, nil
	case had && e.Fence == cur.Fence && e.Applied <= cur.Applied && !deletes(e, cur):
		return Entry{}, false, nil
	case had && !supersedes(e, cur):
		if !repairLosers || cur.Fence > fence {
			// A later owner wrote the key: this member has lost the
			// range and leaves the repair to that owner.
			return Entry{}, false, nil
		}
		cur.Fence = fence
		if err := t.slots.Set(cur); err != nil {
			return Entry{}, false, err
		}
		return cur, true, nil
	}
	return Entry{}, false, t.store(owned(e), cur, had)
}

// owned is e with its own copy of its value, nil exactly when deleted, as
// a table keeps an entry.
func owned(e Entry) Entry {
	if e.Deleted {
		e.Value = nil
	} else if e.Value = bytes.Clone(e.Value); e.Value == nil {
		e.Value = []byte{}
	}
	return e
}
