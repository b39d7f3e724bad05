package deliver

import (
	"context"
	"reflect"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// KeyState is the state of one record's key, kept by the member: what the
// key's earlier records left, and the change this record makes. A
// *statestore.Key is one; package deliver does not import statestore, so
// that a service can keep its state some other way.
type KeyState interface {
	// Get returns the key's state, and false when it has none.
	Get() ([]byte, bool)
	// Put replaces the key's state with value: the record's change.
	Put(value []byte)
	// Delete removes the key's state: the record's change.
	Delete()
}

// sentState is what a request told the endpoint of a record's key state.
type sentState struct {
	// key is the record's KeyState; nil when the request carried no state
	// for the record, and an answer that changes it is then a bad one.
	key KeyState
	// previous: the record is a later record of its key in the request,
	// whose state is what the key's record before it in the request left.
	previous bool
	value    []byte
	present  bool
}

// stateChange is what an answer said of a record's key state.
type stateChange struct {
	changed bool // false: the state stays as it was
	deleted bool
	value   []byte // the new state when changed and not deleted
}

// statesOf reads the key state of each of msgs through lookup (nil: none
// for any). In a request a key's state goes with its first record only:
// its later records in the request are marked previous, since their state
// is what the endpoint's answer about the earlier ones makes it.
func statesOf(ctx context.Context, lookup func(context.Context, *kafka.Message) KeyState, msgs []*kafka.Message) []sentState {
	states := make([]sentState, len(msgs))
	if lookup == nil {
		return states
	}
	first := make(map[string]bool, len(msgs))
	for i, m := range msgs {
		k := lookup(ctx, m)
		if isNil(k) {
			continue
		}
		s := &states[i]
		s.key = k
		if m.Key != nil && first[string(m.Key)] {
			s.previous = true
			continue
		}
		if m.Key != nil {
			first[string(m.Key)] = true
		}
		s.value, s.present = k.Get()
	}
	return states
}

// isNil reports whether k is nil, or an interface holding a nil pointer
// (a lookup returning a nil *statestore.Key as a KeyState), whose methods
// would panic.
func isNil(k KeyState) bool {
	if k == nil {
		return true
	}
	switch v := reflect.ValueOf(k); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Interface, reflect.Chan:
		return v.IsNil()
	}
	return false
}

// applyChanges hands each change the endpoint answered, for a record it
// did (results[i] nil), to the record's KeyState. The decoders have
// refused a change for a record sent without state, or one not done.
func applyChanges(states []sentState, changes []stateChange, results []error) {
	for i, c := range changes {
		if !c.changed || results[i] != nil || states[i].key == nil {
			continue
		}
		if c.deleted {
			states[i].key.Delete()
		} else {
			states[i].key.Put(c.value)
		}
	}
}
