package deliver

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/protobuf/proto"

	"github.com/keyshare/keyshare/deliver/deliverpb"
)

// TestProtoMirrorsJSON: a gRPC request, marshalled and read back as an
// endpoint reads it, says what the HTTP body says of the same records,
// field for field: bytes that are not text, a header name that is not
// valid UTF-8, a null key or value or header value absent where an empty
// one is present, a missing timestamp, the attempt, the hash, and the
// range and fence when known.
func TestProtoMirrorsJSON(t *testing.T) {
	t.Parallel()
	topic := "orders"
	msgs := []*kafka.Message{
		{
			TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 3, Offset: 42},
			Key:            []byte{0xff, 0x00, 'k'}, Value: []byte("v\n"),
			Headers:   []kafka.Header{{Key: "trace", Value: []byte{0x01}}, {Key: "nil", Value: nil}, {Key: "empty", Value: []byte{}}, {Key: "t\xff\xfe", Value: []byte{}}},
			Timestamp: time.UnixMilli(1_700_000_000_123), TimestampType: kafka.TimestampCreateTime,
		},
		{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0, Offset: 7}, Key: nil, Value: []byte{}},
		{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 1, Offset: 8}, Key: []byte{}, Value: nil},
	}
	attempts := []int{1, 3, 2}
	fences := []fence{{hash: 99, known: true, lo: 0, hi: 1 << 32, token: 1234}, {hash: 5}, {hash: 1 << 31, known: true, lo: 7, hi: 9, token: 0}}
	body, err := encodeRequest("m-1", msgs, attempts, fences, noStates(len(msgs)))
	if err != nil {
		t.Fatal(err)
	}
	var want request
	if err := json.Unmarshal(body, &want); err != nil {
		t.Fatal(err)
	}
	wire, err := proto.Marshal(encodeProto("m-1", msgs, attempts, fences, noStates(len(msgs))))
	if err != nil {
		t.Fatal(err)
	}
	var got deliverpb.DeliverRequest
	if err := proto.Unmarshal(wire, &got); err != nil {
		t.Fatal(err)
	}
	if got.GetMember() != want.Member || len(got.GetRecords()) != len(want.Records) {
		t.Fatalf("member %q with %d records, want %q with %d", got.GetMember(), len(got.GetRecords()), want.Member, len(want.Records))
	}
	for i, g := range got.GetRecords() {
		w := want.Records[i]
		if g.GetTopic() != w.Topic || g.GetPartition() != w.Partition || g.GetOffset() != w.Offset ||
			int(g.GetAttempt()) != w.Attempt || g.GetHash() != w.Hash {
			t.Errorf("record %d: %s/%d@%d attempt %d hash %d, want %s/%d@%d attempt %d hash %d", i,
				g.GetTopic(), g.GetPartition(), g.GetOffset(), g.GetAttempt(), g.GetHash(), w.Topic, w.Partition, w.Offset, w.Attempt, w.Hash)
		}
		if (g.Timestamp == nil) != (w.Timestamp == nil) || (w.Timestamp != nil && *g.Timestamp != *w.Timestamp) {
			t.Errorf("record %d: timestamp %v, want %v", i, g.Timestamp, w.Timestamp)
		}
		sameBytes(t, i, "key", g.Key, w.Key)
		sameBytes(t, i, "value", g.Value, w.Value)
		if len(g.GetHeaders()) != len(w.Headers) {
			t.Fatalf("record %d: %d headers, want %d", i, len(g.GetHeaders()), len(w.Headers))
		}
		for j, h := range g.GetHeaders() {
			if h.GetKey() != w.Headers[j].Key || !bytes.Equal(h.KeyBytes, w.Headers[j].KeyBytes) {
				t.Errorf("record %d header %d: %q (bytes %q), want %q (bytes %q)", i, j, h.GetKey(), h.KeyBytes, w.Headers[j].Key, w.Headers[j].KeyBytes)
			}
			sameBytes(t, i, "header "+h.GetKey(), h.Value, w.Headers[j].Value)
		}
		switch {
		case (g.Range == nil) != (w.Range == nil), (g.Fence == nil) != (w.Fence == nil):
			t.Errorf("record %d: range %v fence %v, want range %v fence %v", i, g.Range, g.Fence, w.Range, w.Fence)
		case w.Range != nil && (g.Range.GetLo() != w.Range.Lo || g.Range.GetHi() != w.Range.Hi || *g.Fence != *w.Fence):
			t.Errorf("record %d: range [%d, %d) fence %d, want [%d, %d) fence %d", i, g.Range.GetLo(), g.Range.GetHi(), *g.Fence, w.Range.Lo, w.Range.Hi, *w.Fence)
		}
	}
}

// sameBytes fails t unless got and want are the same bytes, both null or
// both present.
func sameBytes(t *testing.T, i int, what string, got, want []byte) {
	t.Helper()
	if (got == nil) != (want == nil) || !bytes.Equal(got, want) {
		t.Errorf("record %d: %s %q (null: %t), want %q (null: %t)", i, what, got, got == nil, want, want == nil)
	}
}
