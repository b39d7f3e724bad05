package deliver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/internal/textsafe"
)

// WireVersion is the version of the request body. An endpoint that sees
// another answers 501, which is trouble, not a refusal: the records wait
// for an endpoint that reads them instead of going to the dead-letter
// topic (docs/delivery.md).
const WireVersion = 1

// request is the body of one POST: the records of a handler call.
type request struct {
	Version int          `json:"version"`
	Member  string       `json:"member"`
	Records []wireRecord `json:"records"`
}

// wireRecord is one record as the endpoint sees it. Key, value and header
// values are base64 (standard, padded): Kafka's bytes are not text. A
// null key or value is null, an empty one "".
type wireRecord struct {
	Topic     string       `json:"topic"`
	Partition int32        `json:"partition"`
	Offset    int64        `json:"offset"`
	Timestamp *int64       `json:"timestamp"` // ms since the Unix epoch; null when Kafka has none
	Key       []byte       `json:"key"`
	Value     []byte       `json:"value"`
	Headers   []wireHeader `json:"headers"`
	Attempt   int          `json:"attempt"`
	Hash      uint32       `json:"hash"`
	Range     *wireRange   `json:"range"`
	Fence     *int64       `json:"fence"`
	State     *wireState   `json:"state,omitempty"` // absent when the member keeps no state
}

// wireHeader is a record's header. A name is text to most endpoints, so it
// goes as a string; one that is not valid UTF-8 (Kafka's names are bytes)
// goes in Key with each invalid byte replaced by U+FFFD, as encoding/json
// would replace it, and byte for byte, base64, in KeyBytes, which is
// absent otherwise.
type wireHeader struct {
	Key      string `json:"key"`
	KeyBytes []byte `json:"key_bytes,omitempty"`
	Value    []byte `json:"value"`
}

// headerName is a header name as a string field carries it, and its bytes
// when that string cannot hold them: nil when name is valid UTF-8.
func headerName(name string) (text string, raw []byte) {
	if utf8.ValidString(name) {
		return name, nil
	}
	var b strings.Builder
	for _, r := range name { // an invalid byte comes as utf8.RuneError
		b.WriteRune(r)
	}
	return b.String(), []byte(name)
}

// wireRange is the hash range [lo, hi) a record came through.
type wireRange struct {
	Lo uint64 `json:"lo"`
	Hi uint64 `json:"hi"`
}

// encodeRequest builds the body of a call on msgs; attempts[i] is the
// attempt of msgs[i], fences[i] its range and fencing token, and
// states[i] its key's state.
func encodeRequest(member string, msgs []*kafka.Message, attempts []int, fences []fence, states []sentState) ([]byte, error) {
	req := request{Version: WireVersion, Member: member, Records: make([]wireRecord, len(msgs))}
	for i, m := range msgs {
		r := &req.Records[i]
		if m.TopicPartition.Topic != nil {
			r.Topic = *m.TopicPartition.Topic
		}
		r.Partition = m.TopicPartition.Partition
		r.Offset = int64(m.TopicPartition.Offset)
		if m.TimestampType != kafka.TimestampNotAvailable && !m.Timestamp.IsZero() {
			ms := m.Timestamp.UnixMilli()
			r.Timestamp = &ms
		}
		r.Key, r.Value = m.Key, m.Value
		r.Headers = make([]wireHeader, len(m.Headers))
		for j, h := range m.Headers {
			key, raw := headerName(h.Key)
			r.Headers[j] = wireHeader{Key: key, KeyBytes: raw, Value: h.Value}
		}
		r.Attempt = attempts[i]
		f := fences[i]
		r.Hash = f.hash
		if f.known {
			r.Range = &wireRange{Lo: f.lo, Hi: f.hi}
			token := f.token
			r.Fence = &token
		}
		if st := states[i]; st.key != nil {
			r.State = newWireState(st)
		}
	}
	return json.Marshal(req)
}

// Record outcomes in a batch answer.
const (
	statusDone   = "done"
	statusFailed = "failed"
	statusFenced = "fenced"
)

type answerResult struct {
	Status string          `json:"status"`
	Error  string          `json:"error"`
	State  json.RawMessage `json:"state"` // absent: the key's state stays (wirestate.go)
}

// errBadAnswer is a 2xx answer that does not say what became of each
// record (a body that starts as JSON and does not parse, or results that
// are not one per record): the endpoint's trouble, not the records'.
var errBadAnswer = errors.New("deliver: the endpoint's 2xx answer does not say what became of each record")

// utf8BOM is the byte-order mark some writers (.NET's and PowerShell's
// among them) put before UTF-8 text. RFC 8259 lets a JSON reader ignore
// it, and a body with one is the same answer without it.
var utf8BOM = []byte("\xef\xbb\xbf")

// answer is a 2xx body that is JSON. Results is looked up as
// encoding/json matches a field, case aside, so {"Results": [...]} (.NET's
// default casing) is read as {"results": [...]}; so is each result's
// "Status" and "Error".
type answer struct {
	Results json.RawMessage `json:"results"`
}

// decodeAnswer reads the body of a 2xx answer to a request of
// len(states) records, states[i] what it told of record i's key state:
// nil for each record done, a *RefusedError for each failed, a
// *FencedError for each fenced, and what each result says of its key's
// state (decodeChange).
//
// A body that is empty (white space and a byte-order mark aside) or does
// not start as JSON does ("OK", an HTML page) means every record is done:
// the endpoint took the request and failed none of it. A body that starts
// with '{' must be one JSON object, whole: a trailing comma, or an answer
// cut off when the endpoint died mid-body on a Connection: close response,
// might have failed records, so it makes the whole answer bad (the
// endpoint's trouble: the request is sent again) rather than done. An
// object without "results" ({"ok": true}) means every record is done; one
// with "results" must have one per record, each "done", "failed" or
// "fenced", and any other status makes the whole answer bad, which is also
// what a release that predates "fenced" does with it. A body that starts
// with '[' is results without their object: bad too.
func decodeAnswer(body []byte, states []sentState) ([]error, []stateChange, error) {
	n := len(states)
	text := bytes.TrimSpace(bytes.TrimPrefix(body, utf8BOM))
	if len(text) == 0 || (text[0] != '{' && text[0] != '[') {
		return make([]error, n), nil, nil
	}
	if text[0] == '[' {
		return nil, nil, fmt.Errorf("%w: a JSON list, where an object with \"results\" was expected: %s", errBadAnswer, excerpt(text))
	}
	var a answer
	if err := json.Unmarshal(text, &a); err != nil {
		return nil, nil, fmt.Errorf("%w: not one whole JSON object (%v): %s", errBadAnswer, err, excerpt(text))
	}
	if a.Results == nil {
		return make([]error, n), nil, nil
	}
	var results []answerResult
	if err := json.Unmarshal(a.Results, &results); err != nil {
		return nil, nil, fmt.Errorf("%w: results: %v", errBadAnswer, err)
	}
	if len(results) != n {
		return nil, nil, fmt.Errorf("%w: %d results for %d records", errBadAnswer, len(results), n)
	}
	out := make([]error, n)
	changes := make([]stateChange, n)
	for i, r := range results {
		switch r.Status {
		case statusDone:
		case statusFailed:
			out[i] = &RefusedError{Status: 200, Body: safeBody([]byte(r.Error))}
		case statusFenced:
			out[i] = &FencedError{Body: safeBody([]byte(r.Error))}
		default:
			return nil, nil, fmt.Errorf("%w: result %d has status %q, want %q, %q or %q", errBadAnswer, i, textsafe.Cut(r.Status, 64), statusDone, statusFailed, statusFenced)
		}
		c, err := decodeChange(r.State, r.Status, states[i])
		if err != nil {
			return nil, nil, fmt.Errorf("%w: results[%d].state: %v", errBadAnswer, i, err)
		}
		changes[i] = c
	}
	return out, changes, nil
}

// maxExcerpt is how much of a body not understood its error quotes: enough
// to recognise it in the log beside the endpoint's own.
const maxExcerpt = 128

// excerpt is the start of a body not understood, escaped, for its error.
func excerpt(body []byte) string {
	return textsafe.Cut(string(body), maxExcerpt)
}
