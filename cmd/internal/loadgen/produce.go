package loadgen

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Produce writes count records and waits for their acks. Each value is
// "key-K:SEQ", SEQ counting that key's records from 0, so that order can be
// checked downstream. Its keys are the same at every call (seed 1), so
// that benchmark runs compare. It returns how many were acknowledged.
func Produce(ctx context.Context, brokers, topic string, count, keys int, zipf, rate float64, progress bool) (int, error) {
	o := Options{Count: count, Keys: keys, Zipf: zipf, Rate: rate, Seed: 1}
	if progress {
		o.Progress = ProgressBar
	}
	res, err := ProduceWith(ctx, kafka.ConfigMap{"bootstrap.servers": brokers, "acks": "all", "enable.idempotence": true, "linger.ms": 5, "log_level": 3},
		topic, o)
	return res.Acked, err
}

// Options is what ProduceWith writes.
type Options struct {
	Count int     // records
	Keys  int     // distinct keys, key-0 … key-(Keys-1)
	Zipf  float64 // Zipf exponent s > 1 for skewed keys; 0: uniform
	Rate  float64 // records per second; 0: as fast as possible
	// Seed draws the keys: the same seed, the same keys in the same order.
	Seed uint64
	// FirstSeq is each key's first SEQ: a run that starts at an earlier
	// run's Result.NextSeq writes no value that run wrote.
	FirstSeq int
	Progress Progress
}

// Result is what a ProduceWith run wrote.
type Result struct {
	Acked int // records acknowledged
	// NextSeq is the first SEQ no key of the run used: the FirstSeq of a
	// run that goes on from this one.
	NextSeq int
}

// ProduceWith is Produce with a full producer configuration and the
// run's Options. A run whose ctx ends stops producing, waits for the
// reports of the records it already handed to the producer, and returns
// how many were acknowledged with ctx's error.
func ProduceWith(ctx context.Context, cm kafka.ConfigMap, topic string, o Options) (Result, error) {
	count := o.Count
	p, err := kafka.NewProducer(&cm)
	if err != nil {
		//lint:ignore ST1005 Kafka is a proper noun
		return Result{}, fmt.Errorf("Kafka producer: %w", err)
	}
	defer p.Close()
	if err := checkTopic(p, topic); err != nil {
		return Result{}, err
	}
	recs := newRecords(o.Seed, o.Keys, o.Zipf, o.FirstSeq)
	reports := make(chan kafka.Event, 10000)
	dr := countReports(reports)
	start := time.Now()
	lastShown := -1
	produced := 0
	for ; produced < count && ctx.Err() == nil; produced++ {
		key, value := recs.next()
		msg := &kafka.Message{
			TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
			Key:            key,
			Value:          value,
		}
		if err := produceQueued(p, msg, reports); err != nil {
			_ = dr.settle(p, produced)
			return Result{Acked: dr.ackedCount(), NextSeq: recs.nextSeq()}, err
		}
		o.pace(produced+1, start)
		if o.Progress != NoProgress && count >= 1000 {
			if step := (produced + 1) * progressSteps / count; step != lastShown {
				lastShown = step
				fmt.Fprint(os.Stderr, progressLine(o.Progress, step, produced+1, count))
			}
		}
	}
	if o.Progress == ProgressBar && count >= 1000 {
		fmt.Fprintln(os.Stderr)
	}
	err = dr.settle(p, produced)
	res := Result{Acked: dr.ackedCount(), NextSeq: recs.nextSeq()}
	switch {
	case err != nil:
		return res, err
	case dr.failed > 0:
		return res, fmt.Errorf("%d records failed: %w", dr.failed, dr.firstErr)
	}
	return res, ctx.Err()
}

// reportWait bounds the wait for a run's last delivery reports, even when
// its context has ended: the records are already with the producer, and
// the run's count is only right once their reports are in.
const reportWait = 30 * time.Second

// deliveryReports counts a run's delivery reports until it has those of
// the records the run produced (settle says how many). Read failed and
// firstErr once done is closed; acked at any time.
type deliveryReports struct {
	acked    atomic.Int64
	failed   int
	firstErr error // of the first record that failed
	produced chan int
	done     chan struct{}
}

// countReports counts the delivery reports coming on reports.
func countReports(reports <-chan kafka.Event) *deliveryReports {
	dr := &deliveryReports{produced: make(chan int, 1), done: make(chan struct{})}
	go func() {
		defer close(dr.done)
		want, got := -1, 0
		for want < 0 || got < want {
			select {
			case ev := <-reports:
				got++
				dr.tally(ev.(*kafka.Message))
			case want = <-dr.produced:
			}
		}
	}()
	return dr
}

func (dr *deliveryReports) tally(m *kafka.Message) {
	if m.TopicPartition.Error != nil {
		dr.failed++
		if dr.firstErr == nil {
			dr.firstErr = m.TopicPartition.Error
		}
		return
	}
	dr.acked.Add(1)
}

func (dr *deliveryReports) ackedCount() int { return int(dr.acked.Load()) }

// settle tells the counter that produced records were handed to p, flushes
// p and waits, at most reportWait, for their reports.
func (dr *deliveryReports) settle(p *kafka.Producer, produced int) error {
	dr.produced <- produced
	deadline := time.Now().Add(reportWait)
	for p.Flush(1000) > 0 && time.Now().Before(deadline) {
	}
	select {
	case <-dr.done:
		return nil
	case <-time.After(time.Until(deadline)):
		return fmt.Errorf("delivery reports missing after %s: %d of %d records acknowledged", reportWait, dr.ackedCount(), produced)
	}
}

// produceQueued produces msg, waiting while librdkafka's queue is full.
func produceQueued(p *kafka.Producer, msg *kafka.Message, reports chan kafka.Event) error {
	for {
		err := p.Produce(msg, reports)
		if err == nil {
			return nil
		}
		if e, ok := err.(kafka.Error); ok && e.Code() == kafka.ErrQueueFull {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		return err
	}
}

// pace sleeps until n records are due at o.Rate records/s from start; no
// pacing with no rate.
func (o Options) pace(n int, start time.Time) {
	if o.Rate <= 0 {
		return
	}
	if ahead := time.Duration(float64(n)/o.Rate*float64(time.Second)) - time.Since(start); ahead > 0 {
		time.Sleep(ahead)
	}
}

// checkTopic fails with a clear message if topic does not exist or the
// brokers cannot be reached.
func checkTopic(p *kafka.Producer, topic string) error {
	md, err := p.GetMetadata(&topic, false, 10000)
	if err != nil {
		return fmt.Errorf("cannot read metadata from the brokers within 10s: %w; check --brokers", err)
	}
	if tm, ok := md.Topics[topic]; !ok || tm.Error.Code() != kafka.ErrNoError || len(tm.Partitions) == 0 {
		return fmt.Errorf("topic %q does not exist; create it (keyshare cluster --topic %s:3)", topic, topic)
	}
	return nil
}
