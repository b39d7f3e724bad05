package deliver

import (
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/deliver/deliverpb"
)

// encodeProto is encodeRequest's request as a gRPC call's
// (deliverpb/deliver.proto): the same fields, bytes as bytes, and a null
// key, value or header value absent where an empty one is present.
//
// Its strings are valid UTF-8, which proto3 requires: a header name that
// is not goes in key_bytes as well (headerName), so the call's marshalling
// cannot fail on a record's bytes. (Topic names are ASCII in Kafka; the
// member id is the configuration's.)
func encodeProto(member string, msgs []*kafka.Message, attempts []int, fences []fence, states []sentState) *deliverpb.DeliverRequest {
	req := &deliverpb.DeliverRequest{Member: member, Records: make([]*deliverpb.Record, len(msgs))}
	for i, m := range msgs {
		r := &deliverpb.Record{
			Partition: m.TopicPartition.Partition,
			Offset:    int64(m.TopicPartition.Offset),
			Key:       m.Key,
			Value:     m.Value,
			Headers:   make([]*deliverpb.Header, len(m.Headers)),
			Attempt:   int32(attempts[i]),
		}
		if m.TopicPartition.Topic != nil {
			r.Topic = *m.TopicPartition.Topic
		}
		if m.TimestampType != kafka.TimestampNotAvailable && !m.Timestamp.IsZero() {
			ms := m.Timestamp.UnixMilli()
			r.Timestamp = &ms
		}
		for j, h := range m.Headers {
			key, raw := headerName(h.Key)
			r.Headers[j] = &deliverpb.Header{Key: key, KeyBytes: raw, Value: h.Value}
		}
		f := fences[i]
		r.Hash = f.hash
		if f.known {
			r.Range = &deliverpb.Range{Lo: f.lo, Hi: f.hi}
			token := f.token
			r.Fence = &token
		}
		if st := states[i]; st.key != nil {
			r.State = &deliverpb.KeyState{Previous: st.previous}
			if st.present && !st.previous {
				r.State.Value = nonNil(st.value)
			}
		}
		req.Records[i] = r
	}
	return req
}

// decodeResults reads the results of a call on len(states) records that
// returned OK, as decodeAnswer reads a 2xx body's: none at all means every
// record is done; otherwise one per record, each done, failed or fenced,
// and any other status (unset, or one this release does not know) makes
// the whole answer bad: the endpoint's trouble, the request sent again.
// A result's state change is refused as decodeChange refuses one.
func decodeResults(results []*deliverpb.Result, states []sentState) ([]error, []stateChange, error) {
	n := len(states)
	out := make([]error, n)
	if len(results) == 0 {
		return out, nil, nil
	}
	if len(results) != n {
		return nil, nil, fmt.Errorf("%w: %d results for %d records", errBadAnswer, len(results), n)
	}
	changes := make([]stateChange, n)
	for i, r := range results {
		switch r.GetStatus() {
		case deliverpb.RecordStatus_RECORD_STATUS_DONE:
		case deliverpb.RecordStatus_RECORD_STATUS_FAILED:
			out[i] = &RefusedError{Code: "OK", Body: safeBody([]byte(r.GetError()))}
		case deliverpb.RecordStatus_RECORD_STATUS_FENCED:
			out[i] = &FencedError{Body: safeBody([]byte(r.GetError()))}
		default:
			return nil, nil, fmt.Errorf("%w: result %d has status %s, want DONE, FAILED or FENCED", errBadAnswer, i, r.GetStatus())
		}
		st := r.GetState()
		switch {
		case st == nil:
			continue
		case states[i].key == nil:
			return nil, nil, fmt.Errorf("%w: results[%d].state: the call carried no state for this record, so the member keeps none for it (keyshare member --state keeps it): leave state unset", errBadAnswer, i)
		case out[i] != nil:
			return nil, nil, fmt.Errorf("%w: results[%d].state: a %s record changes no state: leave state unset, or answer DONE", errBadAnswer, i, r.GetStatus())
		case st.Value == nil:
			changes[i] = stateChange{changed: true, deleted: true}
		default:
			changes[i] = stateChange{changed: true, value: nonNil(st.Value)}
		}
	}
	return out, changes, nil
}

// nonNil is b, or empty bytes for nil: an empty state is present, which
// protobuf's optional bytes tells apart from absent only by nil.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
