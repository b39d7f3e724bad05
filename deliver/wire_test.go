package deliver

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// TestEncodeRequest: bytes that are not text, a null key beside an empty
// one, headers, a missing timestamp, attempts and a known fence all come
// out as docs/delivery.md says.
func TestEncodeRequest(t *testing.T) {
	t.Parallel()
	topic := "orders"
	msgs := []*kafka.Message{
		{
			TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 3, Offset: 42},
			Key:            []byte{0xff, 0x00, 'k'}, Value: []byte("v\n"),
			Headers:   []kafka.Header{{Key: "trace", Value: []byte{0x01}}, {Key: "nil", Value: nil}, {Key: "t\xff", Value: []byte{}}},
			Timestamp: time.UnixMilli(1_700_000_000_123), TimestampType: kafka.TimestampCreateTime,
		},
		{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0, Offset: 7}, Key: nil, Value: []byte{}},
	}
	body, err := encodeRequest("m-1", msgs, []int{1, 3}, []fence{
		{hash: 99, known: true, lo: 0, hi: 1 << 32, token: 1234},
		{hash: 5},
	}, noStates(2))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"version": 1.0, "member": "m-1",
		"records": []any{
			map[string]any{
				"topic": "orders", "partition": 3.0, "offset": 42.0, "timestamp": 1_700_000_000_123.0,
				"key": "/wBr", "value": "dgo=",
				"headers": []any{map[string]any{"key": "trace", "value": "AQ=="}, map[string]any{"key": "nil", "value": nil},
					map[string]any{"key": "t\uFFFD", "key_bytes": "dP8=", "value": ""}},
				"attempt": 1.0, "hash": 99.0, "range": map[string]any{"lo": 0.0, "hi": 4294967296.0}, "fence": 1234.0,
			},
			map[string]any{
				"topic": "orders", "partition": 0.0, "offset": 7.0, "timestamp": nil,
				"key": nil, "value": "", "headers": []any{},
				"attempt": 3.0, "hash": 5.0, "range": nil, "fence": nil,
			},
		},
	}
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("request body\n got %s\nwant %s", gotJSON, wantJSON)
	}
}

func TestDecodeAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		body   string
		n      int
		failed []bool // nil: a bad answer
	}{
		{"empty body", "", 3, []bool{false, false, false}},
		{"white space", " \r\n", 2, []bool{false, false}},
		{"per record", `{"results":[{"status":"done"},{"status":"failed","error":"no such account"},{"status":"done"}]}`, 3, []bool{false, true, false}},
		{"text", "OK\n", 2, []bool{false, false}},
		{"JSON without results", `{"ok": true}`, 1, []bool{false}},
		{"null results", `{"results": null}`, 1, nil},
		{"too few results", `{"results":[{"status":"done"}]}`, 2, nil},
		{"results not a list", `{"results":{"status":"done"}}`, 1, nil},
		{"unknown status", `{"results":[{"status":"retry"}]}`, 1, nil},
		{"fenced", `{"results":[{"status":"fenced","error":"stale token"},{"status":"done"}]}`, 2, []bool{true, false}},
		// .NET's System.Text.Json writes properties as they are named in C#.
		{"results capitalised", `{"Results":[{"Status":"failed","Error":"no account"}]}`, 1, []bool{true}},
		{"results in capitals", `{"RESULTS":[{"status":"done"},{"status":"failed"}]}`, 2, []bool{false, true}},
		{"byte-order mark", "\ufeff" + `{"results":[{"status":"failed","error":"no account"}]}`, 1, []bool{true}},
		{"byte-order mark alone", "\ufeff\n", 1, []bool{false}},
		{"trailing comma", `{"results":[{"status":"failed"}],}`, 1, nil},
		{"cut off in results", `{"results":[{"status":"done"},{"sta`, 2, nil},
		{"cut off before results", `{"ok": true, "resu`, 1, nil},
		{"object not closed", `{"ok": true`, 1, nil},
		{"object then more", `{"ok": true} {"results":[{"status":"failed"}]}`, 1, nil},
		{"results without their object", `[{"status":"failed"}]`, 1, nil},
		{"JSON text", `"OK"`, 1, []bool{false}},
		{"HTML", "<html><body>accepted</body></html>", 1, []bool{false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, _, err := decodeAnswer([]byte(tc.body), noStates(tc.n))
			if tc.failed == nil {
				if !errors.Is(err, errBadAnswer) {
					t.Fatalf("decodeAnswer(%q) = %v, %v; want errBadAnswer", tc.body, res, err)
				}
				return
			}
			if err != nil || len(res) != tc.n {
				t.Fatalf("decodeAnswer(%q) = %v, %v; want %d results", tc.body, res, err, tc.n)
			}
			for i, f := range tc.failed {
				var refused *RefusedError
				var fenced *FencedError
				if f != (errors.As(res[i], &refused) || errors.As(res[i], &fenced)) {
					t.Errorf("result %d = %v, want failed %v", i, res[i], f)
				}
			}
		})
	}
	if _, _, err := decodeAnswer([]byte("{\"results\":[{\"status\":\"\x1b[2J"), noStates(1)); err == nil || !strings.Contains(err.Error(), `{\"results\":[{\"status\":\"\x1b[2J"`) {
		t.Errorf("a cut answer's error %v: want the start of the body, escaped", err)
	}
	res, _, _ := decodeAnswer([]byte(`{"results":[{"status":"failed","error":"bad\u001b[31m amount"}]}`), noStates(1))
	if got := res[0].Error(); got != `deliver: the endpoint failed the record: "bad\x1b[31m amount"` {
		t.Errorf("a failed record's error %q: want the endpoint's text escaped", got)
	}
}
