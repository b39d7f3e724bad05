package deliver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/deliver/deliverpb"
)

// oddHeaders are headers whose names and values are bytes, not text: a
// name that is not valid UTF-8, one holding U+FFFD itself (valid UTF-8,
// which must not be taken for a replaced byte), and an ordinary one.
var oddHeaders = []kafka.Header{
	{Key: "trace-\xff\xfe", Value: []byte{0xff, 0x00}},
	{Key: "x-\uFFFD", Value: []byte("\xc3")},
	{Key: "plain", Value: nil},
}

// TestHeaderNamesByteExactHTTP: over a real socket, an endpoint that reads
// a header's name as docs/delivery.md says (key_bytes when present, else
// key) gets every name byte for byte, and every value.
func TestHeaderNamesByteExactHTTP(t *testing.T) {
	t.Parallel()
	type header struct {
		Key      string  `json:"key"`
		KeyBytes *[]byte `json:"key_bytes"`
		Value    []byte  `json:"value"`
	}
	var mu sync.Mutex
	var got []header
	ep, _ := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Records []struct {
				Headers []header `json:"headers"`
			} `json:"records"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body.Records) != 1 {
			t.Errorf("request body: %v, %d records", err, len(body.Records))
			return
		}
		mu.Lock()
		got = body.Records[0].Headers
		mu.Unlock()
	})
	m := message("orders", 0, 1, "k")
	m.Headers = oddHeaders
	if err := ep.Handler()(t.Context(), m); err != nil {
		t.Fatalf("handler = %v, want the record done", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(oddHeaders) {
		t.Fatalf("%d headers arrived, want %d", len(got), len(oddHeaders))
	}
	for i, h := range got {
		name := []byte(h.Key)
		if h.KeyBytes != nil {
			name = *h.KeyBytes
		}
		want := oddHeaders[i]
		if !bytes.Equal(name, []byte(want.Key)) || !sameValue(h.Value, want.Value) {
			t.Errorf("header %d arrived as %q (key %q) = %q, want %q = %q", i, name, h.Key, h.Value, want.Key, want.Value)
		}
	}
}

// TestHeaderNamesByteExactGRPC: over a real socket, a record whose header
// name is not valid UTF-8 (which a proto3 string cannot carry) reaches the
// endpoint, its names and values byte for byte, instead of making the
// call fail before anything is sent.
func TestHeaderNamesByteExactGRPC(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []*deliverpb.Header
	ep, _ := newGRPCEndpoint(t, func(ctx context.Context, req *deliverpb.DeliverRequest) (*deliverpb.DeliverResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		got = req.GetRecords()[0].GetHeaders()
		return &deliverpb.DeliverResponse{}, nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	m := message("orders", 0, 1, "k")
	m.Headers = oddHeaders
	if err := ep.Handler()(ctx, m); err != nil {
		t.Fatalf("handler = %v (endpoint: %v), want the record delivered", err, ep.Ready())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(oddHeaders) {
		t.Fatalf("%d headers arrived, want %d", len(got), len(oddHeaders))
	}
	for i, h := range got {
		name := []byte(h.GetKey())
		if h.KeyBytes != nil {
			name = h.KeyBytes
		}
		want := oddHeaders[i]
		if !bytes.Equal(name, []byte(want.Key)) || !sameValue(h.Value, want.Value) {
			t.Errorf("header %d arrived as %q (key %q) = %q, want %q = %q", i, name, h.GetKey(), h.Value, want.Key, want.Value)
		}
	}
}

// sameValue reports whether got and want are the same bytes, both null or
// both present.
func sameValue(got, want []byte) bool {
	return (got == nil) == (want == nil) && bytes.Equal(got, want)
}

// failingTransport is a transport that cannot encode any request.
type failingTransport struct{ err error }

func (f failingTransport) prepare(string, []*kafka.Message, []int, []fence, []sentState) (call, error) {
	return nil, f.err
}

func (failingTransport) close() {}

// TestEncodingErrorFailsRecords: a request that cannot be encoded is each
// of its records' failure, the cause named, so the consumer's retries and
// dead-letter topic apply; it is never the endpoint's trouble, which would
// hold the records for ever and count nothing towards --max-attempts.
func TestEncodingErrorFailsRecords(t *testing.T) {
	t.Parallel()
	ep, err := New(Config{URL: "http://127.0.0.1:1/", MemberID: "m-1", Backoff: time.Millisecond, MaxBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cause := errors.New("header 0's name cannot be encoded")
	ep.transport = failingTransport{err: cause}
	batch := []*kafka.Message{message("orders", 0, 1, "a"), message("orders", 0, 2, "b")}
	res := ep.BatchHandler()(t.Context(), batch)
	if len(res) != len(batch) {
		t.Fatalf("%d results for %d records", len(res), len(batch))
	}
	for i, err := range res {
		if !errors.Is(err, cause) {
			t.Errorf("result %d = %v, want the record failed, naming %q", i, err, cause)
		}
	}
	if err := ep.Ready(); err != nil {
		t.Errorf("Ready = %v: an encoding error is the records', not the endpoint's trouble", err)
	}
}
