package keyops

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"
)

// scriptedLog is a Source playing one partition: Poll hands out events in
// order (nil once they are spent), and each watermark query reads the
// bounds of the log as it stands then.
type scriptedLog struct {
	low, high int64
	events    []kafka.Event
	// grow, if set, runs at each watermark query: records produced
	// meanwhile.
	grow      func(l *scriptedLog)
	assigned  []int64 // the offset of each Assign, in order
	assignErr error
	closed    bool
}

func (l *scriptedLog) Assign(ps []kafka.TopicPartition) error {
	if l.assignErr != nil {
		return l.assignErr
	}
	l.assigned = append(l.assigned, int64(ps[0].Offset))
	return nil
}

func (l *scriptedLog) Poll(int) kafka.Event {
	if len(l.events) == 0 {
		return nil
	}
	e := l.events[0]
	l.events = l.events[1:]
	return e
}

func (l *scriptedLog) QueryWatermarkOffsets(string, int32, int) (int64, int64, error) {
	if l.grow != nil {
		l.grow(l)
	}
	return l.low, l.high, nil
}

func (l *scriptedLog) Close() error { l.closed = true; return nil }

func record(o int64) *kafka.Message {
	topic := "parking"
	return &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 3, Offset: kafka.Offset(o)}}
}

// readAll reads r to its end (a nil record) and returns the offsets read
// and the error it ended with.
func readAll(t *testing.T, r *Reader) ([]int64, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a bound on a broken script, not a speed
	defer cancel()
	var got []int64
	for {
		m, err := r.Next(ctx)
		if err != nil || m == nil {
			return got, err
		}
		got = append(got, int64(m.TopicPartition.Offset))
	}
}

func newTestReader(t *testing.T, l *scriptedLog, from, stop int64) *Reader {
	t.Helper()
	r, err := NewReader(l, hclog.NewNullLogger(), "parking", 3, from, stop)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestReaderToEnd: an unpark's read (no stop) passes over records below
// its start, steps over offsets no record has (transaction markers), and
// queries the end again when it gets there, so records parked meanwhile
// are read too.
func TestReaderToEnd(t *testing.T) {
	l := &scriptedLog{high: 7, events: []kafka.Event{record(3), record(4), kafka.PartitionEOF{Offset: 6}, record(6)}}
	grown := false
	l.grow = func(l *scriptedLog) {
		if l.high == 7 && len(l.events) == 0 && !grown {
			grown = true
			l.high = 9
			l.events = append(l.events, record(8))
		}
	}
	r := newTestReader(t, l, 4, -1)
	got, err := readAll(t, r)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{4, 6, 8}; !slices.Equal(got, want) {
		t.Fatalf("read %v, want %v", got, want)
	}
	if r.Pos() != 9 {
		t.Fatalf("at %d after the end, want 9", r.Pos())
	}
	r.Close()
	if !l.closed {
		t.Fatal("Close left the source open")
	}
}

// TestReaderStop: a replay's read ends at its stop, also when the next
// record lies past it, and reads nothing from a start at the stop.
func TestReaderStop(t *testing.T) {
	l := &scriptedLog{high: 20, events: []kafka.Event{record(2), record(5), record(9)}}
	r := newTestReader(t, l, 2, 7)
	got, err := readAll(t, r)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{2, 5}; !slices.Equal(got, want) || r.Pos() != 7 {
		t.Fatalf("read %v up to %d, want %v up to 7", got, r.Pos(), want)
	}
	if got, _ := readAll(t, newTestReader(t, &scriptedLog{high: 20, events: []kafka.Event{record(7)}}, 7, 7)); len(got) != 0 {
		t.Fatalf("a read from its stop read %v", got)
	}
}

// TestReaderDeleted: records deleted before they were read end a replay
// with a RecordsDeletedError naming them; an unpark reads on from the
// log's start.
func TestReaderDeleted(t *testing.T) {
	reset := kafka.NewError(kafka.ErrAutoOffsetReset, "offset out of range", false)

	replay := newTestReader(t, &scriptedLog{low: 10, high: 20, events: []kafka.Event{reset}}, 4, 15)
	_, err := readAll(t, replay)
	var deleted *RecordsDeletedError
	if !errors.As(err, &deleted) || *deleted != (RecordsDeletedError{Topic: "parking", Partition: 3, From: 4, UpTo: 10}) {
		t.Fatalf("a replay over deleted records ended with %v, want records 4 to 9 deleted", err)
	}

	l := &scriptedLog{low: 10, high: 12, events: []kafka.Event{reset, record(10), record(11)}}
	unpark := newTestReader(t, l, 4, -1)
	got, err := readAll(t, unpark)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{10, 11}; !slices.Equal(got, want) || !slices.Equal(l.assigned, []int64{4, 10}) {
		t.Fatalf("an unpark over deleted records read %v, assigned %v; want %v, assigned [4 10]", got, l.assigned, want)
	}
}

// TestReaderErrors: a fatal error or a record's error ends the read; a
// partition it cannot assign closes the consumer.
func TestReaderErrors(t *testing.T) {
	fatal := kafka.NewError(kafka.ErrFatal, "fenced", true)
	if _, err := readAll(t, newTestReader(t, &scriptedLog{high: 5, events: []kafka.Event{fatal}}, 0, -1)); err == nil {
		t.Fatal("a fatal error did not end the read")
	}
	failed := record(0)
	failed.TopicPartition.Error = kafka.NewError(kafka.ErrMsgSizeTooLarge, "too large", false)
	if _, err := readAll(t, newTestReader(t, &scriptedLog{high: 5, events: []kafka.Event{failed}}, 0, -1)); err == nil {
		t.Fatal("a record's error did not end the read")
	}
	l := &scriptedLog{assignErr: errors.New("no such partition")}
	if _, err := NewReader(l, hclog.NewNullLogger(), "parking", 3, 0, -1); err == nil || !l.closed {
		t.Fatalf("assign failed: err %v, closed %v; want an error and the consumer closed", err, l.closed)
	}
}
