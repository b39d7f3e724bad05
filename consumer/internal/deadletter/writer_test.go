package deadletter

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"
)

// scriptedProducer answers each copy with the next error of its script
// (nil: acknowledged; none left: acknowledged), and keeps the copies.
type scriptedProducer struct {
	answers []error
	written []*kafka.Message
}

func (p *scriptedProducer) Produce(m *kafka.Message, reports chan kafka.Event) error {
	p.written = append(p.written, m)
	var err error
	if len(p.answers) > 0 {
		err, p.answers = p.answers[0], p.answers[1:]
	}
	reports <- &kafka.Message{TopicPartition: kafka.TopicPartition{Error: err}}
	return nil
}

var (
	errTooLarge   = kafka.NewError(kafka.ErrMsgSizeTooLarge, "too large", false)
	errBrokerDown = kafka.NewError(kafka.ErrTransport, "broker down", false)
)

func testWriter(pr Producer) *Writer {
	return &Writer{Producer: pr, Topic: "orders.dlq", Backoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
		Log: hclog.NewNullLogger(), Reduced: new(atomic.Int64), Failed: new(atomic.Int64)}
}

func failedRecord() *kafka.Message {
	topic := "orders"
	return &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 1, Offset: 5}, Key: []byte("k"), Value: []byte("v")}
}

// TestWriteSmaller: a copy too large is sent again smaller, down to
// keyshare's headers alone, and counted reduced once it is written.
func TestWriteSmaller(t *testing.T) {
	pr := &scriptedProducer{answers: []error{errTooLarge, errTooLarge}}
	w := testWriter(pr)
	if err := w.Write(context.Background(), failedRecord(), errors.New("boom"), 3); err != nil {
		t.Fatal(err)
	}
	var dropped []string
	for _, m := range pr.written {
		dropped = append(dropped, HeaderValue(m, HeaderDropped))
	}
	if len(dropped) != 3 || dropped[0] != "" || dropped[1] != "value" || dropped[2] != "key,value,headers" {
		t.Fatalf("copies written dropping %q, want the whole record, then without its value, then headers alone", dropped)
	}
	if w.Reduced.Load() != 1 || w.Failed.Load() != 0 {
		t.Fatalf("reduced %d failed %d, want 1 and 0", w.Reduced.Load(), w.Failed.Load())
	}
}

// TestWriteRetries: any other failure writes the same copy again, each
// counted failed; a copy refused as too large even with headers alone is
// retried too, not dropped.
func TestWriteRetries(t *testing.T) {
	pr := &scriptedProducer{answers: []error{errBrokerDown, errBrokerDown, errTooLarge, errTooLarge, errTooLarge, errTooLarge}}
	w := testWriter(pr)
	if err := w.Write(context.Background(), failedRecord(), errors.New("boom"), 3); err != nil {
		t.Fatal(err)
	}
	var dropped []string
	for _, m := range pr.written {
		dropped = append(dropped, HeaderValue(m, HeaderDropped))
	}
	want := []string{"", "", "", "value", "key,value,headers", "key,value,headers", "key,value,headers"}
	if len(dropped) != len(want) {
		t.Fatalf("copies written dropping %q, want %q", dropped, want)
	}
	for i := range want {
		if dropped[i] != want[i] {
			t.Fatalf("copies written dropping %q, want %q", dropped, want)
		}
	}
	if w.Failed.Load() != 4 || w.Reduced.Load() != 1 {
		t.Fatalf("failed %d reduced %d, want 4 and 1", w.Failed.Load(), w.Reduced.Load())
	}
}

// TestWriteStops: a write that keeps failing ends when ctx does, with its
// error.
func TestWriteStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr := &scriptedProducer{}
	for range 1000 {
		pr.answers = append(pr.answers, errBrokerDown)
	}
	w := testWriter(pr)
	w.Failed = nil // not counted: nil counters are allowed
	time.AfterFunc(20*time.Millisecond, cancel)
	if err := w.Write(ctx, failedRecord(), errors.New("boom"), 3); !errors.Is(err, context.Canceled) {
		t.Fatalf("Write returned %v after ctx ended, want context.Canceled", err)
	}
}

// TestRenameOurs: a record's own headers named like keyshare's, in any
// case, are renamed in the copy, and the record's are left alone.
func TestRenameOurs(t *testing.T) {
	hs := []kafka.Header{{Key: "Keyshare.error", Value: []byte("forged")}, {Key: "keyshare", Value: []byte("short")}, {Key: "trace", Value: []byte("t")}}
	got := RenameOurs(hs)
	if got[0].Key != "original.Keyshare.error" || got[1].Key != "keyshare" || got[2].Key != "trace" || hs[0].Key != "Keyshare.error" {
		t.Fatalf("renamed %q (the record's %q)", got, hs)
	}
}
