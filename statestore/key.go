package statestore

import (
	"bytes"
	"context"
)

// Key is the state of one record's key, as a handler sees it: what the
// key's earlier records left, and the change this record makes. The
// change is written only if the handler returns nil; a handler that
// fails changes nothing. A Key belongs to one handler call and is not
// safe for use by several goroutines at once.
type Key struct {
	key     []byte
	value   []byte
	present bool
	changed bool
}

// keyContext is the context key under which a handler call finds its Key.
type keyContext struct{}

// KeyOf returns the state of the key of the record ctx was given for, in
// a Handler made by Store.Handler (or a context derived from its).
// Outside one it returns nil.
func KeyOf(ctx context.Context) *Key {
	k, _ := ctx.Value(keyContext{}).(*Key)
	return k
}

// Get returns the key's state, and false if it has none (never set, or
// deleted). The bytes are the caller's to keep.
func (k *Key) Get() ([]byte, bool) {
	if !k.present {
		return nil, false
	}
	return bytes.Clone(k.value), true
}

// Put replaces the key's state with value (copied): the record's change.
// A record with a null key has no state; its Put makes the record fail
// with keystate.ErrNullKey.
func (k *Key) Put(value []byte) {
	if value == nil {
		value = []byte{}
	}
	k.value, k.present, k.changed = bytes.Clone(value), true, true
}

// Delete removes the key's state: the record's change, appended as a
// tombstone.
func (k *Key) Delete() {
	k.value, k.present, k.changed = nil, false, true
}
