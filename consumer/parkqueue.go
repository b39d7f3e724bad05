package consumer

import (
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/consumer/internal/keyops"
)

// parkQueue is a parked key's queue as its ParkWriter sees it
// (keyops.ParkQueue): the records queued under p.mu, each finished
// through the pipeline.
type parkQueue struct {
	p  *pipeline
	kp *keyParker
}

// Take pops the next record to copy. One that needs no copy (its range
// drained, or its key is not parked any more: then it is given back, with
// its key's later records) is settled here.
func (q *parkQueue) Take() (j *job, needed, more bool) {
	p := q.p
	p.mu.Lock()
	if len(q.kp.queue) == 0 {
		p.mu.Unlock()
		return nil, false, false
	}
	j = q.kp.queue[0]
	q.kp.queue = q.kp.queue[1:]
	q.kp.taken++ // in the same step as the pop: the key never looks done between them
	p.mu.Unlock()
	if j.ctx.Err() != nil {
		p.mu.Lock()
		q.kp.settledLocked(p, 1)
		p.mu.Unlock()
		return nil, false, true // abandoned: its finish is ignored
	}
	if _, ok := p.parkFor(j); !ok {
		q.GiveBack(j)
		return nil, false, true
	}
	return j, true, true
}

// Copy is j's copy, with the park set on its key now.
func (q *parkQueue) Copy(j *job) (*kafka.Message, bool) {
	op, ok := q.p.parkFor(j)
	if !ok {
		return nil, false
	}
	return keyops.ParkedCopy(op.Record.ParkTopic, j.m, q.p.fenceOf(j).Token), true
}

// GiveBack gives back j, whose key is not parked any more, and its key's
// later records (finish): they are fetched again and handled as the key's
// operation now says, after the copies on their way.
func (q *parkQueue) GiveBack(j *job) {
	p := q.p
	p.finish(j, false)
	j.cancel()
	p.mu.Lock()
	q.kp.queue = nil // given back with j
	q.kp.settledLocked(p, 1)
	p.mu.Unlock()
}

// Done finishes j, its copy acknowledged.
func (q *parkQueue) Done(j *job) {
	p := q.p
	p.finish(j, true)
	j.cancel()
	p.mu.Lock()
	q.kp.settledLocked(p, 1)
	p.mu.Unlock()
}

// Requeue puts failed back at the front of the queue: still pending, no
// wake.
func (q *parkQueue) Requeue(failed []*job) {
	q.p.mu.Lock()
	q.kp.queue = append(failed, q.kp.queue...)
	q.kp.taken -= len(failed)
	q.p.mu.Unlock()
}

func (q *parkQueue) Origin(j *job) (string, int32, int64) { return j.key.topic, j.key.partition, j.o }

// NewProducer makes the parker's own producer.
func (q *parkQueue) NewProducer() (keyops.Producer, error) {
	pr, logs, err := newParkingProducer(q.p.c.cfg.Kafka, q.p.c.log.Named("librdkafka").Named("parking"))
	if err != nil {
		return nil, err
	}
	return &parkingProducer{Producer: pr, logs: logs}, nil
}

// Backoff waits d, less if the key's operation changes meanwhile.
func (q *parkQueue) Backoff(d time.Duration) { q.p.sleepOrKeyOp(q.p.ctx, d) }

// parkingProducer is a parker's producer; Close waits for its logs.
type parkingProducer struct {
	*kafka.Producer
	logs chan struct{}
}

func (pr *parkingProducer) Close() {
	pr.Producer.Close()
	<-pr.logs
}

// newParkingProducer makes a parker's producer from the consumer's Kafka
// settings, as the dead-letter producer's (acks=all, idempotent), with
// gapless delivery, and batches of any size: a copy too large for the
// parking topic fails its batch, and then the parker writes its copies
// one at a time until the large one is at the front and fails alone.
func newParkingProducer(user kafka.ConfigMap, log hclog.Logger) (*kafka.Producer, chan struct{}, error) {
	pm := ProducerConfig(user)
	pm["acks"] = "all"
	pm["enable.idempotence"] = true
	pm["enable.gapless.guarantee"] = true
	pm["go.logs.channel.enable"] = true
	pr, err := kafka.NewProducer(&pm)
	if err != nil {
		return nil, nil, fmt.Errorf("consumer: create the parking producer: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ForwardLogs(log, pr.Logs())
	}()
	return pr, done, nil
}
