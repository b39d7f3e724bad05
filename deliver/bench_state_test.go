package deliver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// BenchmarkDeliverState is what keyed state adds to a request over HTTP:
// each record sent with its key's state (8 bytes, read through
// Config.KeyState) and each result answered with a new one, which goes
// back to the KeyState, beside the same request and results without
// state. The endpoint reads the body and answers a result per record
// prepared in advance; the records are BenchmarkDeliver's, each of its
// own key. ns/record is per record.
func BenchmarkDeliverState(b *testing.B) {
	for _, n := range []int{1, 100} {
		for _, withState := range []bool{false, true} {
			name := fmt.Sprintf("batch-%d/state-%t", n, withState)
			b.Run(name, func(b *testing.B) { benchmarkState(b, n, withState) })
		}
	}
}

func benchmarkState(b *testing.B, n int, withState bool) {
	result := `{"status":"done"}`
	if withState {
		result = `{"status":"done","state":{"value":"MTIzNDU2Nzg="}}`
	}
	answer := []byte(`{"results":[` + strings.Repeat(result+",", n-1) + result + `]}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write(answer)
	}))
	defer srv.Close()
	cfg := Config{URL: srv.URL}
	if withState {
		states := &memStates{m: map[string][]byte{}}
		cfg.KeyState = states.lookup
	}
	ep, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer ep.Close()
	topic := "orders"
	batch := make([]*kafka.Message, n)
	for i := range batch {
		batch[i] = &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0, Offset: kafka.Offset(i)},
			Key: fmt.Appendf(nil, "customer-%07d", i), Value: bytes.Repeat([]byte("v"), 100),
			Headers: []kafka.Header{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}}}
	}
	h, ctx := ep.BatchHandler(), context.Background()
	for b.Loop() {
		for _, err := range h(ctx, batch) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
}
