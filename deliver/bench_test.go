package deliver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/grpc"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/deliver/deliverpb"
)

// BenchmarkDeliver is what handing a record to an endpoint costs over a
// Go handler: the encoding, the HTTP round trip on loopback and the answer,
// with an endpoint that does nothing (a Go net/http server that reads the
// body and answers 200 with no body). Records have a 16-byte key, a
// 100-byte value and one header. ns/record is per record; for the single
// record cases it is ns/op.
func BenchmarkDeliver(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	ep, err := New(Config{URL: srv.URL})
	if err != nil {
		b.Fatal(err)
	}
	defer ep.Close()
	benchmarkEndpoint(b, ep)
}

// BenchmarkDeliverGRPC is BenchmarkDeliver over gRPC: a grpc-go server on
// loopback whose Deliver does nothing and answers no results (every
// record done), the records as BenchmarkDeliver's.
func BenchmarkDeliverGRPC(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	deliverpb.RegisterDeliveryServer(srv, &deliveryServer{serve: func(context.Context, *deliverpb.DeliverRequest) (*deliverpb.DeliverResponse, error) {
		return &deliverpb.DeliverResponse{}, nil
	}})
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	ep, err := New(Config{URL: "grpc://" + ln.Addr().String()})
	if err != nil {
		b.Fatal(err)
	}
	defer ep.Close()
	benchmarkEndpoint(b, ep)
}

func benchmarkEndpoint(b *testing.B, ep *Endpoint) {
	topic := "orders"
	record := func(i int) *kafka.Message {
		return &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0, Offset: kafka.Offset(i)},
			Key: fmt.Appendf(nil, "customer-%07d", i), Value: bytes.Repeat([]byte("v"), 100),
			Headers: []kafka.Header{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}}}
	}
	ctx := context.Background()
	var sink consumer.Handler = func(context.Context, *kafka.Message) error { return nil }
	b.Run("go-handler", func(b *testing.B) {
		m := record(1)
		for b.Loop() {
			_ = sink(ctx, m)
		}
	})
	b.Run("record", func(b *testing.B) {
		h, m := ep.Handler(), record(1)
		for b.Loop() {
			if err := h(ctx, m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("record-16-workers", func(b *testing.B) {
		h := ep.Handler()
		b.SetParallelism(16) // 16 × GOMAXPROCS goroutines; 16 requests open at once is the default --concurrency
		b.RunParallel(func(pb *testing.PB) {
			m := record(1)
			for pb.Next() {
				if err := h(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	for _, n := range []int{16, 100} {
		b.Run(fmt.Sprintf("batch-%d", n), func(b *testing.B) {
			h := ep.BatchHandler()
			batch := make([]*kafka.Message, n)
			for i := range batch {
				batch[i] = record(i)
			}
			for b.Loop() {
				for _, err := range h(ctx, batch) {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
		})
	}
}
