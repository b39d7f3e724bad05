package keyops

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/internal/textsafe"
)

// A parked key's copies are pipelined: a ParkWriter writes them in the
// key's order with up to its window on their way at once, and has each
// record finished once the broker has acknowledged its copy. The producer
// is idempotent, so the broker takes the copies in the order they were
// written, and with gapless delivery on (enable.gapless.guarantee) a copy
// that fails makes every later one of the producer fail too, rather than
// land in front of the failed one when it is written again. The writer
// then writes the failed copies again from the first, one at a time until
// one is acknowledged, after a backoff, on a new producer if the old one
// stopped; a copy is never counted done before its acknowledgement.

// Producer writes a key's copies: a *kafka.Producer made for one writer,
// whose Close also waits for its logs to be forwarded.
type Producer interface {
	Produce(m *kafka.Message, deliveryChan chan kafka.Event) error
	GetFatalError() error
	Close()
}

// ParkQueue is what a ParkWriter asks of the key's queue of records to
// park, which its owner keeps under its own lock: R is the owner's
// record.
type ParkQueue[R comparable] interface {
	// Take pops the key's next queued record; more is false when none
	// is queued. needed is false when the record needs no copy any more
	// (abandoned, or its key is not parked now): Take has settled it.
	Take() (r R, needed, more bool)
	// Copy is r's copy with the key's park as it stands now; false when
	// the park is gone, and the writer gives r back.
	Copy(r R) (*kafka.Message, bool)
	// GiveBack gives r, whose key is not parked any more, and the key's
	// later records back to be handled as the key's operation now says.
	GiveBack(r R)
	// Done finishes r, its copy acknowledged.
	Done(r R)
	// Requeue puts failed, records whose copies failed (in their order),
	// back at the front of the queue.
	Requeue(failed []R)
	// Origin is where r was read, for the log and the copies' order.
	Origin(r R) (topic string, partition int32, offset int64)
	// NewProducer makes a producer for the key's copies.
	NewProducer() (Producer, error)
	// Backoff waits d before the failed copies are written again.
	Backoff(d time.Duration)
}

// ParkWriterConfig is a ParkWriter's window and backoff.
type ParkWriterConfig struct {
	Window              int           // copies on their way at once
	Backoff, MaxBackoff time.Duration // the first wait after a failure, and the most
	Log                 hclog.Logger
}

// ParkWriter writes one key's copies while its owner holds the key.
type ParkWriter[R comparable] struct {
	ctx    context.Context // the member's work: its end stops the writer
	q      ParkQueue[R]
	cfg    ParkWriterConfig
	pr     Producer
	acks   chan kafka.Event // the delivery reports of the copies flying
	flying []*flight[R]     // copies written, not yet reported, in order
	window int              // 1 after a failure, until a copy is acknowledged
	// backoff is the wait before the failed copies are written again;
	// logged says a failure since the last acknowledgement was logged.
	backoff time.Duration
	logged  bool
}

// flight is a copy on its way; its address is the copy's Opaque, which
// its delivery report carries back.
type flight[R comparable] struct{ r R }

// NewParkWriter writes q's copies until ctx ends.
func NewParkWriter[R comparable](ctx context.Context, q ParkQueue[R], cfg ParkWriterConfig) *ParkWriter[R] {
	return &ParkWriter[R]{ctx: ctx, q: q, cfg: cfg, window: cfg.Window, backoff: cfg.Backoff, acks: make(chan kafka.Event, cfg.Window)}
}

// StepResult is what a ParkWriter's step leaves its owner to do.
type StepResult int

const (
	// StepOn: step again.
	StepOn StepResult = iota
	// StepIdle: nothing is queued and no copy is on its way; the owner
	// waits for the key's next record, then steps again, or ends.
	StepIdle
	// StepStop: the member's work ended; the writer stops.
	StepStop
)

// Step writes the queued copies the window allows and settles the
// oldest report.
func (w *ParkWriter[R]) Step() StepResult {
	for len(w.flying) < w.window {
		r, needed, more := w.q.Take()
		if !more {
			break
		}
		if !needed {
			continue // abandoned or given back
		}
		m, ok := w.q.Copy(r)
		if !ok {
			w.q.GiveBack(r)
			continue
		}
		if err := w.write(r, m); err != nil {
			w.retry([]R{r}, err)
			if w.ctx.Err() != nil {
				return StepStop
			}
			return StepOn
		}
	}
	if len(w.flying) == 0 {
		return StepIdle
	}
	select {
	case ev := <-w.acks:
		w.settle(ev)
	case <-w.ctx.Done():
		return StepStop
	}
	return StepOn
}

// write sends r's copy m, making the writer's producer first if it has
// none.
func (w *ParkWriter[R]) write(r R, m *kafka.Message) error {
	if w.pr == nil {
		pr, err := w.q.NewProducer()
		if err != nil {
			return err
		}
		w.pr = pr
	}
	f := &flight[R]{r: r}
	m.Opaque = f
	if err := w.pr.Produce(m, w.acks); err != nil {
		return err
	}
	w.flying = append(w.flying, f)
	return nil
}

// settle records the report ev of a copy: the record is done once its
// copy is acknowledged. A failure fails every copy after it (gapless
// delivery): their reports are awaited, and all are written again.
func (w *ParkWriter[R]) settle(ev kafka.Event) {
	r, ok, err := w.reported(ev)
	if !ok {
		return
	}
	if err == nil {
		w.q.Done(r)
		w.window, w.backoff, w.logged = w.cfg.Window, w.cfg.Backoff, false
		return
	}
	failed := []R{r}
	for len(w.flying) > 0 {
		select {
		case ev := <-w.acks:
			if f, ok, ferr := w.reported(ev); ok && ferr == nil {
				topic, partition, offset := w.q.Origin(f)
				w.cfg.Log.Error("a parked copy was acknowledged after an earlier one failed: the parking topic holds it ahead of that one", "topic", topic, "partition", partition, "offset", offset)
				w.q.Done(f)
			} else if ok {
				failed = append(failed, f)
			}
		case <-w.ctx.Done():
			return
		}
	}
	slices.SortFunc(failed, func(a, b R) int {
		_, _, oa := w.q.Origin(a)
		_, _, ob := w.q.Origin(b)
		return cmp.Compare(oa, ob)
	})
	w.retry(failed, err)
}

// reported takes the record of report ev out of the copies flying; ok is
// false for an event that is not the report of one.
func (w *ParkWriter[R]) reported(ev kafka.Event) (r R, ok bool, err error) {
	m, isMsg := ev.(*kafka.Message)
	if !isMsg {
		return r, false, nil
	}
	f, _ := m.Opaque.(*flight[R])
	i := slices.Index(w.flying, f)
	if f == nil || i < 0 {
		return r, false, nil
	}
	w.flying = slices.Delete(w.flying, i, i+1)
	return f.r, true, m.TopicPartition.Error
}

// retry puts failed, records whose copies failed with err (in order),
// back at the front of the queue, writes them again after the backoff,
// one at a time until one is acknowledged, and makes a new producer if
// the old one stopped.
func (w *ParkWriter[R]) retry(failed []R, err error) {
	// A producer stopped by a fatal error (gapless delivery's, after a
	// copy failed) is made again, once no copy of it is on its way:
	// their reports are awaited first.
	if len(w.flying) == 0 && w.pr != nil && w.pr.GetFatalError() != nil {
		w.Close()
	}
	w.q.Requeue(failed)
	log := w.cfg.Log.Debug
	if !w.logged {
		log, w.logged = w.cfg.Log.Error, true
	}
	topic, partition, offset := w.q.Origin(failed[0])
	log("parking a record failed; writing it again (the key's records wait, other keys go on)", "topic", topic, "partition", partition,
		"offset", offset, "records", len(failed), "error", textsafe.Escape(err.Error()))
	w.q.Backoff(w.backoff)
	w.backoff = min(2*max(w.backoff, time.Millisecond), w.cfg.MaxBackoff)
	w.window = 1
}

// Close closes the writer's producer, if it has one; a later copy makes a
// new one.
func (w *ParkWriter[R]) Close() {
	if w.pr == nil {
		return
	}
	w.pr.Close()
	w.pr = nil
}
