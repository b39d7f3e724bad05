package keystate

import (
	"bytes"
	"strconv"
	"strings"
)

// FormatVersion is the version of the changelog format written by this
// code: the HeaderVersion header of every entry. Decoding refuses any other
// version rather than guess what a later format meant.
const FormatVersion = 1

// The headers of a changelog entry. Each value is a decimal number in
// canonical form (no sign, no leading zero), as the dead-letter and parking
// headers of package consumer are.
//
// They live under their own prefix, keyshare.state., rather than reuse
// consumer's names: a parked copy's keyshare.fence is the token the record
// was parked under and keyshare.offset the original record's offset, read
// by an unpark; these are the token a change of state was made under and
// the input offset it applied, read by a restore. Distinct names keep the
// two readers from taking each other's records: a parked copy written to
// the changelog by mistake fails Decode (no HeaderVersion) instead of
// passing for a change of state.
const (
	HeaderVersion = "keyshare.state.v"
	HeaderApplied = "keyshare.state.applied"
	HeaderFence   = "keyshare.state.fence"

	headerPrefix = "keyshare.state."
)

// Header is one record header, the part of a Kafka header this package
// reads and writes; an adapter converts to and from its client's type.
type Header struct {
	Key   string
	Value []byte
}

// Entry is one change of a key's state, as appended to the changelog: the
// record key, the new value (or Deleted, written as a tombstone), the input
// offset whose record made the change, and the fencing token of the range
// it was made under.
type Entry struct {
	Key     []byte
	Value   []byte // nil when Deleted
	Deleted bool
	Applied int64 // offset of the input record that made the change
	Fence   int64 // the range's fencing token (consumer.Fence.Token)
}

// Headers returns the headers to write with e. The record's value is
// e.Value, or null (a tombstone) when e.Deleted.
func Headers(e Entry) []Header {
	return []Header{
		{Key: HeaderVersion, Value: strconv.AppendInt(nil, FormatVersion, 10)},
		{Key: HeaderApplied, Value: strconv.AppendInt(nil, e.Applied, 10)},
		{Key: HeaderFence, Value: strconv.AppendInt(nil, e.Fence, 10)},
	}
}

// Decode reads one changelog record: its key, its value (valueIsNull for a
// tombstone) and its headers. It is strict: a null key, a missing or
// repeated header of ours, a header under keyshare.state. that this
// version does not write, a value that is not a canonical non-negative
// decimal, an unknown format version, and a tombstone with a value are
// each a *DecodeError naming the field and the value. Headers outside
// keyshare.state. are ignored: a tool that copies a topic may add its own.
//
// The returned entry refers to key and value; it does not copy them.
func Decode(key, value []byte, valueIsNull bool, headers []Header) (Entry, error) {
	if key == nil {
		return Entry{}, &DecodeError{Field: "key", Problem: "the record has no key; every change of state is keyed"}
	}
	fail := func(field string, v []byte, problem string) (Entry, error) {
		return Entry{}, &DecodeError{Key: key, Field: field, Value: v, HasValue: v != nil, Problem: problem}
	}
	var version, applied, fence []byte
	var unknown *Header
	for i, h := range headers {
		var slot *[]byte
		switch h.Key {
		case HeaderVersion:
			slot = &version
		case HeaderApplied:
			slot = &applied
		case HeaderFence:
			slot = &fence
		default:
			if unknown == nil && strings.HasPrefix(strings.ToLower(h.Key), headerPrefix) {
				unknown = &headers[i]
			}
			continue
		}
		if *slot != nil {
			return fail(h.Key, h.Value, "header repeated; a change carries it once")
		}
		*slot = nonNil(h.Value)
	}
	// The version first: a later format may name its other headers
	// differently.
	if version == nil {
		return fail(HeaderVersion, nil, "header missing; is this a keyshare state changelog?")
	}
	if v, err := parseCount(version); err != "" {
		return fail(HeaderVersion, version, err)
	} else if v != FormatVersion {
		return fail(HeaderVersion, version, "format version "+strconv.FormatInt(v, 10)+", this build reads version "+strconv.Itoa(FormatVersion))
	}
	if unknown != nil {
		return fail(unknown.Key, nonNil(unknown.Value), "header not written by format version "+strconv.Itoa(FormatVersion))
	}
	e := Entry{Key: key, Value: value, Deleted: valueIsNull}
	var err string
	for _, f := range []struct {
		name string
		raw  []byte
		dst  *int64
	}{{HeaderApplied, applied, &e.Applied}, {HeaderFence, fence, &e.Fence}} {
		if f.raw == nil {
			return fail(f.name, nil, "header missing")
		}
		if *f.dst, err = parseCount(f.raw); err != "" {
			return fail(f.name, f.raw, err)
		}
	}
	switch {
	case valueIsNull && len(value) > 0:
		return fail("value", value, "a tombstone (null value) with a value")
	case valueIsNull:
		e.Value = nil
	case value == nil:
		e.Value = []byte{} // a value, empty: nil is a deleted key's
	}
	return e, nil
}

// parseCount reads a canonical non-negative decimal int64, or says what is
// wrong with b.
func parseCount(b []byte) (int64, string) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	switch {
	case err != nil:
		return 0, "not a decimal number in int64"
	case n < 0:
		return 0, "negative"
	case !bytes.Equal(strconv.AppendInt(nil, n, 10), b):
		return 0, "not in canonical form (no sign, no leading zero)"
	}
	return n, ""
}

// nonNil lets a present but empty header value differ from a missing one.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
