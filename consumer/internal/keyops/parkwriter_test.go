package keyops

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"
)

var errCopy = kafka.NewError(kafka.ErrMsgTimedOut, "copy timed out", false)

// fakeQueue is a key's queue of records (their offsets) to park, with
// what the writer did to each.
type fakeQueue struct {
	queue     []int64
	unparked  map[int64]bool // records whose copy finds the park gone
	done      []int64
	givenBack []int64
	requeued  [][]int64
	backoffs  []time.Duration
	producers []*fakeProducer
	// refuse fails the next NewProducer calls, one each.
	refuse int
	// silent producers never report a copy.
	silent bool
	// fails says whether the copy of offset o, written by producer n
	// (0 the first), fails; a producer's copies after a failed one fail
	// too, as with gapless delivery.
	fails func(n int, o int64) bool
}

func (q *fakeQueue) Take() (int64, bool, bool) {
	if len(q.queue) == 0 {
		return 0, false, false
	}
	o := q.queue[0]
	q.queue = q.queue[1:]
	return o, true, true
}

func (q *fakeQueue) Copy(o int64) (*kafka.Message, bool) {
	if q.unparked[o] {
		return nil, false
	}
	topic := "parking"
	return &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic}, Key: []byte(strconv.FormatInt(o, 10))}, true
}

func (q *fakeQueue) GiveBack(o int64) { q.givenBack = append(q.givenBack, o); q.queue = nil }
func (q *fakeQueue) Done(o int64)     { q.done = append(q.done, o) }

func (q *fakeQueue) Requeue(failed []int64) {
	q.requeued = append(q.requeued, slices.Clone(failed))
	q.queue = append(slices.Clone(failed), q.queue...)
}

func (q *fakeQueue) Origin(o int64) (string, int32, int64) { return "orders", 0, o }
func (q *fakeQueue) Backoff(d time.Duration)               { q.backoffs = append(q.backoffs, d) }

func (q *fakeQueue) NewProducer() (Producer, error) {
	if q.refuse > 0 {
		q.refuse--
		return nil, errors.New("idempotence refused")
	}
	pr := &fakeProducer{n: len(q.producers), q: q}
	q.producers = append(q.producers, pr)
	return pr, nil
}

// fakeProducer reports each copy as it is written.
type fakeProducer struct {
	n       int
	q       *fakeQueue
	written []int64
	fatal   error
	closed  bool
}

func (p *fakeProducer) Produce(m *kafka.Message, reports chan kafka.Event) error {
	o, _ := strconv.ParseInt(string(m.Key), 10, 64)
	p.written = append(p.written, o)
	var err error
	if p.fatal != nil || p.q.fails != nil && p.q.fails(p.n, o) {
		err, p.fatal = errCopy, errCopy
	}
	if p.q.silent {
		return nil
	}
	reports <- &kafka.Message{Opaque: m.Opaque, TopicPartition: kafka.TopicPartition{Error: err}}
	return nil
}

func (p *fakeProducer) GetFatalError() error { return p.fatal }
func (p *fakeProducer) Close()               { p.closed = true }

func newTestWriter(q *fakeQueue, window int) *ParkWriter[int64] {
	return NewParkWriter[int64](context.Background(), q, ParkWriterConfig{Window: window, Backoff: time.Millisecond, MaxBackoff: 3 * time.Millisecond, Log: hclog.NewNullLogger()})
}

// run steps w until it is idle, at most steps times.
func run(t *testing.T, w *ParkWriter[int64], steps int) {
	t.Helper()
	for range steps {
		if w.Step() == StepIdle {
			return
		}
	}
	t.Fatalf("the writer is not idle after %d steps", steps)
}

// TestParkWriterWindow: copies are written in the key's order, up to the
// window ahead of the oldest acknowledgement, and each record is done at
// its copy's acknowledgement, in order.
func TestParkWriterWindow(t *testing.T) {
	q := &fakeQueue{queue: []int64{0, 1, 2, 3, 4}}
	w := newTestWriter(q, 3)
	if w.Step() != StepOn {
		t.Fatal("the first step did not go on")
	}
	if got := q.producers[0].written; !slices.Equal(got, []int64{0, 1, 2}) || !slices.Equal(q.done, []int64{0}) {
		t.Fatalf("after one step: written %v, done %v; want [0 1 2] written, [0] done", got, q.done)
	}
	run(t, w, 10)
	if !slices.Equal(q.done, []int64{0, 1, 2, 3, 4}) || len(q.producers) != 1 {
		t.Fatalf("done %v with %d producers, want [0 1 2 3 4] with one", q.done, len(q.producers))
	}
	w.Close()
	if !q.producers[0].closed {
		t.Fatal("Close left the producer open")
	}
}

// TestParkWriterFailure: a copy that fails fails the producer's later
// ones (gapless delivery); all are queued again in order, the producer,
// stopped, is replaced once their reports are in, and the copies are
// written again one at a time until one is acknowledged, after a backoff
// that grows while they fail.
func TestParkWriterFailure(t *testing.T) {
	q := &fakeQueue{queue: []int64{0, 1, 2, 3, 4, 5}}
	q.fails = func(n int, o int64) bool { return n < 2 && o == 1 } // twice: the first two producers
	w := newTestWriter(q, 4)
	w.Step() // writes 0-3, 0 acknowledged
	w.Step() // writes 4; 1 failed, and 2-4 with it
	if want := [][]int64{{1, 2, 3, 4}}; !slices.EqualFunc(q.requeued, want, slices.Equal) || !q.producers[0].closed {
		t.Fatalf("requeued %v (producer closed: %v), want %v on a closed producer", q.requeued, q.producers[0].closed, want)
	}
	w.Step() // one copy only, on a new producer: it fails again
	if got := q.producers[1].written; !slices.Equal(got, []int64{1}) {
		t.Fatalf("the second producer wrote %v, want [1]: one at a time after a failure", got)
	}
	w.Step() // one at a time still: 1 acknowledged
	if got := q.producers[2].written; !slices.Equal(got, []int64{1}) {
		t.Fatalf("the third producer wrote %v before its first acknowledgement, want [1]", got)
	}
	run(t, w, 20)
	if !slices.Equal(q.done, []int64{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("done %v, want every record in order", q.done)
	}
	if want := []time.Duration{time.Millisecond, 2 * time.Millisecond}; !slices.Equal(q.backoffs, want) {
		t.Fatalf("backoffs %v, want %v", q.backoffs, want)
	}
	if got := q.producers[2].written; !slices.Equal(got, []int64{1, 2, 3, 4, 5}) {
		t.Fatalf("the last producer wrote %v, want [1 2 3 4 5]", got)
	}
}

// TestParkWriterGivesBack: a record whose key's park is gone when its
// copy would be written is given back, with the key's later records.
func TestParkWriterGivesBack(t *testing.T) {
	q := &fakeQueue{queue: []int64{0, 1, 2, 3}, unparked: map[int64]bool{1: true}}
	run(t, newTestWriter(q, 4), 10)
	if !slices.Equal(q.done, []int64{0}) || !slices.Equal(q.givenBack, []int64{1}) {
		t.Fatalf("done %v, given back %v; want [0] done and [1] given back (its later records with it)", q.done, q.givenBack)
	}
}

// TestParkWriterNoProducer: a producer that cannot be made is retried as
// a failed copy is, its record queued again after a backoff capped at
// MaxBackoff.
func TestParkWriterNoProducer(t *testing.T) {
	q := &fakeQueue{queue: []int64{0, 1}, refuse: 3}
	run(t, newTestWriter(q, 4), 10)
	if !slices.Equal(q.done, []int64{0, 1}) || len(q.requeued) != 3 {
		t.Fatalf("done %v after %d requeues, want [0 1] after 3", q.done, len(q.requeued))
	}
	if want := []time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond}; !slices.Equal(q.backoffs, want) {
		t.Fatalf("backoffs %v, want %v", q.backoffs, want)
	}
}

// TestParkWriterStops: the member's stop ends a writer waiting for
// reports.
func TestParkWriterStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	q := &fakeQueue{queue: []int64{0}, silent: true}
	w := NewParkWriter[int64](ctx, q, ParkWriterConfig{Window: 1, Log: hclog.NewNullLogger()})
	if got := w.Step(); got != StepStop {
		t.Fatalf("step %v with the member stopped, want StepStop", got)
	}
}
