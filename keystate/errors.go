package keystate

import (
	"errors"
	"fmt"

	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/ledger"
)

// ErrNullKey is returned for a change of a record with a null key: such a
// record has no key to keep state for.
var ErrNullKey = errors.New("keystate: a record with a null key has no keyed state")

// DecodeError says which changelog record could not be read, which field of
// it (a header name, "key" or "value") and why.
type DecodeError struct {
	Key      []byte // the record's key; nil when the key is missing
	Field    string
	Value    []byte // the field's value, when it has one
	HasValue bool
	Problem  string
}

func (e *DecodeError) Error() string {
	what := e.Field
	if e.HasValue {
		what += " " + textsafe.Quote(string(e.Value))
	}
	key := "with no key"
	if e.Key != nil {
		key = "for key " + textsafe.Quote(string(e.Key))
	}
	return fmt.Sprintf("keystate: bad changelog record %s: %s: %s (a member restores only from its own group's changelog, written by this format version: check the changelog topic setting)", key, what, e.Problem)
}

// MemoryError reports a change or a restore that would take a table past
// its bound; the table is unchanged.
type MemoryError struct {
	Range    ledger.HashRange
	Key      []byte
	Size     int64 // the bytes the table would count with the change
	MaxBytes int64
}

func (e *MemoryError) Error() string {
	return fmt.Sprintf("keystate: state of hash range %s would count %d bytes with key %s, over MaxBytes %d: raise MaxBytes, or run more members so that each holds a smaller range",
		e.Range, e.Size, textsafe.Quote(string(e.Key)), e.MaxBytes)
}

// ChangeError reports a change the table refuses; the table is unchanged.
type ChangeError struct {
	Key     []byte
	Applied int64 // the change's input offset
	Fence   int64 // the change's fencing token
	Reason  string
}

func (e *ChangeError) Error() string {
	return fmt.Sprintf("keystate: change of key %s at offset %d, fence %d: %s", textsafe.Quote(string(e.Key)), e.Applied, e.Fence, e.Reason)
}
