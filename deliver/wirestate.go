package deliver

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

// A record's key state on the HTTP wire (docs/delivery.md, "Keyed
// state"). In a request, "state" is {"value": base64} when the key has
// state, {"value": null} when it has none, {"previous": true} on a key's
// later records in the request, and absent when the member keeps no
// state. In a result, "state" is the key's state after the record: the
// same {"value": base64} to put, {"value": null} to delete, absent to
// leave it as it was.

// wireState is "state" in a request's record. Value points to the
// key's state, or to nil bytes (null) when it has none; it is nil
// (absent) on a key's later records, which have Previous instead. Plain
// fields, not a json.Marshaler, whose output encoding/json would scan
// again.
type wireState struct {
	Value    *[]byte `json:"value,omitempty"`
	Previous bool    `json:"previous,omitempty"`
}

// newWireState is sent's "state".
func newWireState(sent sentState) *wireState {
	switch {
	case sent.previous:
		return &wireState{Previous: true}
	case !sent.present:
		return &wireState{Value: new([]byte)}
	}
	value := nonNil(sent.value) // "": an empty state, which null is not
	return &wireState{Value: &value}
}

// answerState is "state" in a result. Its field is matched as
// encoding/json matches one, case aside, as the result's own are.
type answerState struct {
	Value json.RawMessage `json:"value"`
}

var jsonNull = []byte("null")

// decodeChange reads a result's "state", raw (nil when absent), for a
// record whose result has status and whose request told sent of its
// state. It refuses a change for a record sent without state (the member
// keeps none for it: it would be lost) and for one not done (a record
// that fails or is fenced changes nothing), so that an endpoint's mistake
// is found at once rather than dropped.
func decodeChange(raw json.RawMessage, status string, sent sentState) (stateChange, error) {
	if raw == nil {
		return stateChange{}, nil
	}
	switch {
	case sent.key == nil:
		return stateChange{}, errors.New("the request carried no state for this record, so the member keeps none for it (keyshare member --state keeps it): leave state out")
	case status != statusDone:
		return stateChange{}, fmt.Errorf("a %q record changes no state: leave state out, or answer %q", status, statusDone)
	case bytes.Equal(bytes.TrimSpace(raw), jsonNull):
		return stateChange{}, errors.New(`null: leave state out to keep the key's state, or give {"value": null} to delete it`)
	}
	var s answerState
	if err := json.Unmarshal(raw, &s); err != nil {
		return stateChange{}, fmt.Errorf(`want {"value": base64} or {"value": null}, got %s`, excerpt(raw))
	}
	switch {
	case s.Value == nil:
		return stateChange{}, fmt.Errorf(`%s has no "value": give {"value": base64} to put the key's state, {"value": null} to delete it, or leave state out to keep it`, excerpt(raw))
	case bytes.Equal(s.Value, jsonNull):
		return stateChange{changed: true, deleted: true}, nil
	}
	value, ok := base64String(s.Value)
	if !ok {
		return stateChange{}, fmt.Errorf("value %s: want a base64 string (standard alphabet, padded), or null to delete the key's state", excerpt(s.Value))
	}
	return stateChange{changed: true, value: value}, nil
}

// base64String decodes raw, a JSON value, as a base64 string: never nil
// when ok ("" is empty bytes). A string without escapes, which base64
// text is, is decoded as it stands, with no second pass of encoding/json.
func base64String(raw []byte) (value []byte, ok bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return nil, false // a number or an array (which would decode into []byte too)
	}
	if bytes.IndexByte(raw, '\\') >= 0 {
		if json.Unmarshal(raw, &value) != nil {
			return nil, false
		}
		return nonNil(value), true
	}
	text := raw[1 : len(raw)-1]
	value = make([]byte, base64.StdEncoding.DecodedLen(len(text)))
	n, err := base64.StdEncoding.Decode(value, text)
	if err != nil {
		return nil, false
	}
	return value[:n], true
}
