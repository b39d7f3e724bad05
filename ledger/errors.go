package ledger

import (
	"errors"
	"fmt"
)

// DecodeError says which stored value could not be read and why.
type DecodeError struct {
	Key     string
	Problem string
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("ledger: bad entry at %q: %s (delete the key to have the range restart from the group's committed offset)", e.Key, e.Problem)
}

// ErrNotDispatched is returned by Complete for an offset that is not in flight
// in this state: never fetched, not in the range, or completed already.
var ErrNotDispatched = errors.New("ledger: offset not in flight")

// OffsetError reports an offset the state cannot accept; the state is
// unchanged.
type OffsetError struct {
	Op     string // "observe" or "complete"
	Offset int64
	Reason string
	Err    error
}

func (e *OffsetError) Error() string {
	return fmt.Sprintf("ledger: %s offset %d: %s", e.Op, e.Offset, e.Reason)
}

func (e *OffsetError) Unwrap() error { return e.Err }
