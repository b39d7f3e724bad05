package keystate

import (
	"bytes"
	"iter"

	"github.com/keyshare/keyshare/ledger"
)

// Table is the state of the keys of one hash range: per key its value and
// the input offset and fencing token of the change that made it. A deleted
// key is kept without a value, for its applied offset (the skip rule); it
// counts its key's bytes and EntryOverhead against MaxBytes.
//
// A Table is not safe for concurrent use.
type Table struct {
	rng      ledger.HashRange
	maxBytes int64
	bytes    int64
	slots    map[string]slot
}

type slot struct {
	value   []byte // nil when deleted
	applied int64
	fence   int64
	deleted bool
	// shadowed: during a restore, a losing entry of the key was read
	// after this one, so this one is not the key's last record.
	shadowed bool
}

// NewTable returns an empty table for range r: the state of a range no
// change was ever recorded for. A range with history starts from a Restore.
func NewTable(r ledger.HashRange, cfg Config) (*Table, error) {
	if err := r.Valid(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Table{rng: r, maxBytes: cfg.MaxBytes, slots: map[string]slot{}}, nil
}

// Range is the hash range the table holds the keys of.
func (t *Table) Range() ledger.HashRange { return t.rng }

// Len is the number of keys the table knows, deleted ones included.
func (t *Table) Len() int { return len(t.slots) }

// Bytes is what the table counts against MaxBytes.
func (t *Table) Bytes() int64 { return t.bytes }

// Get returns key's value, false if the key has none (never set, or
// deleted). The value is the table's: do not modify it.
func (t *Table) Get(key []byte) ([]byte, bool) {
	s, ok := t.slots[string(key)]
	if !ok || s.deleted {
		return nil, false
	}
	return s.value, true
}

// Applied returns the input offset of key's last change, deleted keys
// included; false if the table has none.
func (t *Table) Applied(key []byte) (int64, bool) {
	s, ok := t.slots[string(key)]
	return s.applied, ok
}

// Seen is the skip rule: whether the record at offset has changed key's
// state already (offset <= the key's applied offset), so running it again
// would apply it twice. A member asks before it runs each record.
func (t *Table) Seen(key []byte, offset int64) bool {
	s, ok := t.slots[string(key)]
	return skipApplied && ok && offset <= s.applied
}

// Entry returns key's last change as a changelog entry.
func (t *Table) Entry(key []byte) (Entry, bool) {
	s, ok := t.slots[string(key)]
	if !ok {
		return Entry{}, false
	}
	return s.entry(key), true
}

// All yields every key's last change, in no particular order.
func (t *Table) All() iter.Seq[Entry] {
	return func(yield func(Entry) bool) {
		for k, s := range t.slots {
			if !yield(s.entry([]byte(k))) {
				return
			}
		}
	}
}

func (s slot) entry(key []byte) Entry {
	return Entry{Key: key, Value: s.value, Deleted: s.deleted, Applied: s.applied, Fence: s.fence}
}

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
	return t.change(key, bytes.Clone(value), false, applied, fence)
}

// Delete removes key's value as the change made by the input record at
// applied, under fencing token fence, and returns the tombstone to append.
// The table keeps the key's applied offset. It refuses what Put refuses.
func (t *Table) Delete(key []byte, applied, fence int64) (Entry, error) {
	return t.change(key, nil, true, applied, fence)
}

func (t *Table) change(key, value []byte, deleted bool, applied, fence int64) (Entry, error) {
	refuse := func(reason string) (Entry, error) {
		return Entry{}, &ChangeError{Key: key, Applied: applied, Fence: fence, Reason: reason}
	}
	if key == nil {
		return Entry{}, ErrNullKey
	}
	if applied < 0 || fence < 0 {
		return refuse("negative offset or fencing token")
	}
	if !t.rng.Contains(ledger.Hash(key, 0)) {
		return refuse("key hash outside the table's range " + t.rng.String())
	}
	cur, ok := t.slots[string(key)]
	if ok && skipApplied && applied <= cur.applied {
		return refuse("at or below the key's applied offset " + itoa(cur.applied) + " (ask Seen before running a record)")
	}
	if ok && fence < cur.fence {
		return refuse("below the key's fencing token " + itoa(cur.fence) + ": a later owner of the range changed it, so this member has lost the range")
	}
	s := slot{value: value, applied: applied, fence: fence, deleted: deleted}
	if err := t.store(key, s, cur, ok); err != nil {
		return Entry{}, err
	}
	return s.entry(key), nil
}

// store puts s at key in place of cur (when had), within MaxBytes.
func (t *Table) store(key []byte, s, cur slot, had bool) error {
	n := t.bytes + size(key, s.value)
	if had {
		n -= size(key, cur.value)
	}
	if n > t.maxBytes {
		return &MemoryError{Range: t.rng, Key: key, Size: n, MaxBytes: t.maxBytes}
	}
	t.bytes = n
	t.slots[string(key)] = s
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
	cur, had := t.slots[string(e.Key)]
	switch {
	case had && deletes(e, cur) && cur.fence <= fence:
		s := slotOf(e)
		s.fence = fence
		if err := t.store(e.Key, s, cur, had); err != nil {
			return Entry{}, false, err
		}
		return s.entry(e.Key), true, nil
	case had && e.Fence == cur.fence && e.Applied <= cur.applied && !deletes(e, cur):
		return Entry{}, false, nil
	case had && !supersedes(e, cur):
		if !repairLosers || cur.fence > fence {
			// A later owner wrote the key: this member has lost the
			// range and leaves the repair to that owner.
			return Entry{}, false, nil
		}
		cur.fence = fence
		t.slots[string(e.Key)] = cur
		return cur.entry(e.Key), true, nil
	}
	return Entry{}, false, t.store(e.Key, slotOf(e), cur, had)
}

// slotOf is the state e leaves its key in, with its own copy of the value.
func slotOf(e Entry) slot {
	s := slot{applied: e.Applied, fence: e.Fence, deleted: e.Deleted}
	if !e.Deleted {
		s.value = bytes.Clone(e.Value)
		if s.value == nil {
			s.value = []byte{}
		}
	}
	return s
}
