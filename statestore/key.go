package statestore

import (
	"bytes"
	"context"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Key is the state of one record's key, as a handler sees it: what the
// key's earlier records left, and the change this record makes. The
// change is written only if the handler's result for the record is nil;
// a record that fails changes nothing. A Key is not safe for use by
// several goroutines at once.
type Key struct {
	msg *kafka.Message
	// state is the key's state as the handler sees it now: shared by
	// the Keys of one key's records in a batch, so that each record
	// sees the changes of the records before it.
	state *keyState
	// The record's own change, if it made one.
	changed bool
	value   []byte
	present bool
}

// keyState is a key's value, or its absence.
type keyState struct {
	value   []byte
	present bool
}

// keyContext is the context key under which a handler call finds its
// records' Keys.
type keyContext struct{}

// keyFinder finds the Key of a record handed to a handler call.
type keyFinder interface {
	keyOf(m *kafka.Message) *Key
}

// KeyOf returns the state of record m's key, for a Handler made by
// Store.Handler or a BatchHandler made by Store.BatchHandler, called with
// the context the call was given (or one derived from it). For any other
// context or message it returns nil.
//
// In a batch, a key's records come in offset order: handle them in that
// order, and each one's Get sees the changes of the ones before it.
func KeyOf(ctx context.Context, m *kafka.Message) *Key {
	if ctx == nil || m == nil {
		return nil
	}
	f, ok := ctx.Value(keyContext{}).(keyFinder)
	if !ok {
		return nil
	}
	return f.keyOf(m)
}

// keyOf answers KeyOf for a single record's call.
func (k *Key) keyOf(m *kafka.Message) *Key {
	if m != k.msg && !sameRecord(m, k.msg) {
		return nil
	}
	return k
}

// batchKeys answers KeyOf for the records of one batch call.
type batchKeys map[*kafka.Message]*Key

func (b batchKeys) keyOf(m *kafka.Message) *Key {
	if k := b[m]; k != nil {
		return k
	}
	for msg, k := range b {
		if sameRecord(m, msg) {
			return k
		}
	}
	return nil
}

// sameRecord reports whether a and b are the same record (one a copy of
// the other).
func sameRecord(a, b *kafka.Message) bool {
	return a.TopicPartition.Topic != nil && b.TopicPartition.Topic != nil && *a.TopicPartition.Topic == *b.TopicPartition.Topic &&
		a.TopicPartition.Partition == b.TopicPartition.Partition && a.TopicPartition.Offset == b.TopicPartition.Offset
}

// Get returns the key's state, and false if it has none (never set, or
// deleted). The bytes are the caller's to keep.
func (k *Key) Get() ([]byte, bool) {
	if !k.state.present {
		return nil, false
	}
	return bytes.Clone(k.state.value), true
}

// Put replaces the key's state with value (copied): the record's change.
// A record with a null key has no state; its Put makes the record fail
// with keystate.ErrNullKey.
func (k *Key) Put(value []byte) {
	if value == nil {
		value = []byte{}
	}
	k.set(bytes.Clone(value), true)
}

// Delete removes the key's state: the record's change, appended as a
// tombstone.
func (k *Key) Delete() { k.set(nil, false) }

func (k *Key) set(value []byte, present bool) {
	k.changed, k.value, k.present = true, value, present
	k.state.value, k.state.present = value, present
}
