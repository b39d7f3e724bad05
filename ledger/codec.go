package ledger

import (
	"encoding/json"
	"fmt"

	"github.com/keyshare/keyshare/internal/strictjson"
)

// FormatVersion is the version of the stored entry format written by this
// code. Decoding refuses any other version rather than guess.
const FormatVersion = 1

// stored is an entry as it appears in etcd:
//
//	{"v":1,"segments":[{"lo":0,"hi":4294967296,"next":1200,"pending":[1100,1150]}]}
type stored struct {
	V        int       `json:"v"`
	Segments []Segment `json:"segments"`
}

// Encode returns the stored form of e.
func Encode(e Entry) []byte {
	segs := e.Segments
	if segs == nil {
		segs = []Segment{}
	}
	b, err := json.Marshal(stored{V: FormatVersion, Segments: segs})
	if err != nil {
		// Only plain integers and slices: marshalling cannot fail.
		panic(fmt.Sprintf("ledger: encode entry: %v", err))
	}
	return b
}

// Decode reads the entry stored at key for range r. It is strict: unknown
// fields, an unknown version, negative offsets, unsorted or duplicate pending
// offsets, pending offsets at or above next, and segments that do not cover r
// are all errors naming the key.
func Decode(key string, data []byte, r HashRange) (Entry, error) {
	var s stored
	if err := strictjson.Decode(data, &s); err != nil {
		return Entry{}, &DecodeError{Key: key, Problem: "not a ledger entry: " + err.Error()}
	}
	if s.V != FormatVersion {
		return Entry{}, &DecodeError{Key: key, Problem: fmt.Sprintf("format version %d, this build reads version %d", s.V, FormatVersion)}
	}
	e := Entry{Segments: s.Segments}
	if len(e.Segments) == 0 {
		e.Segments = nil
	}
	if err := e.Validate(r); err != nil {
		return Entry{}, &DecodeError{Key: key, Problem: err.Error()}
	}
	return e, nil
}
