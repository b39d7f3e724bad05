package keystate

import "iter"

// Slots is where a Table keeps its keys' states. The Table applies the
// rules and counts the bytes; a Slots only stores and finds, so that a
// range's state can live in memory (NewMemorySlots, what NewTable uses) or
// on a member's disk (package statestore keeps it in Pebble). A Slots
// serves one table at a time and need not be safe for concurrent use.
type Slots interface {
	// Get returns key's state, false if it has none.
	Get(key []byte) (Entry, bool, error)
	// Set stores e as the state of e.Key. It may keep e.Value, not
	// e.Key.
	Set(e Entry) error
	// All yields every state it holds, in no particular order. An error
	// ends it, yielded with a zero Entry.
	All() iter.Seq2[Entry, error]
}

// NewMemorySlots returns empty Slots in memory.
func NewMemorySlots() Slots { return memorySlots{} }

// memorySlots keep a key's state in 64 bytes of map slot beside the key's
// and the value's bytes (EntryOverhead counts it).
type memorySlots map[string]memorySlot

type memorySlot struct {
	value   []byte // nil when deleted
	applied int64
	fence   int64
	deleted bool
}

func (m memorySlots) Get(key []byte) (Entry, bool, error) {
	s, ok := m[string(key)]
	if !ok {
		return Entry{}, false, nil
	}
	return Entry{Key: key, Value: s.value, Deleted: s.deleted, Applied: s.applied, Fence: s.fence}, true, nil
}

func (m memorySlots) Set(e Entry) error {
	m[string(e.Key)] = memorySlot{value: e.Value, applied: e.Applied, fence: e.Fence, deleted: e.Deleted}
	return nil
}

func (m memorySlots) All() iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		for k, s := range m {
			if !yield(Entry{Key: []byte(k), Value: s.value, Deleted: s.deleted, Applied: s.applied, Fence: s.fence}, nil) {
				return
			}
		}
	}
}
