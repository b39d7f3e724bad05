package consumer

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer/internal/deadletter"
	"github.com/keyshare/keyshare/consumer/internal/keyops"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/schema"
)

// Parking a key (keyshare key park; state.KeyOpPark): while the park is
// set, the owner of the key's hash handles each of the key's records by
// copying it to the parking topic, into the partition of the same number,
// with the origin's topic, partition and offset in keyshare's headers (as
// a dead letter has them), and counts the record done once the broker has
// acknowledged the copy. Parking is the record's handling, in offset
// order like any other: the key's copies are written in its order, and
// pipelined (parker.go), so the parked records lie in the parking
// partition in their original order, the
// committed offset moves past them, and retention of the origin can never
// take one. A copy is written again until it is acknowledged or the
// member must stop working on the record (the range moved, the session
// ended): then it stays pending for the range's next owner, who parks it
// (a second copy at most, as any record may run twice on a crash).

// parkFor returns the park set on j's key, if any.
func (p *pipeline) parkFor(j *job) (coord.KeyOp, bool) {
	if p == nil || p.sess == nil || j.key.null {
		return coord.KeyOp{}, false
	}
	op, ok := p.sess.KeyOp(j.key.topic, j.key.partition, j.m.Key)
	if !ok || op.Record.Op != schema.KeyOpPark {
		return coord.KeyOp{}, false
	}
	return op, true
}

// park copies j's record to op's parking topic and waits for the ack. It
// returns nil when the record is done, ctx's error if the member must stop
// working on it.
func (p *pipeline) park(ctx context.Context, j *job, op coord.KeyOp) error {
	c := p.c
	// Under the key's lock, with the park as it stands now: an unpark's
	// prelude (prelude.go) reads the parking partition to its end under
	// the same lock, so no copy lands behind it.
	p.mu.Lock()
	lock := p.keyLockLocked(j.key)
	p.mu.Unlock()
	lock.Lock()
	defer lock.Unlock()
	if again, ok := p.parkFor(j); !ok || again.Name != op.Name || again.Record.ParkTopic != op.Record.ParkTopic {
		return errParkChanged
	}
	copyOf := keyops.ParkedCopy(op.Record.ParkTopic, j.m, p.fenceOf(j).Token)
	backoff, failed := c.cfg.Retry.Backoff, false
	for {
		// A producer that cannot be made (a Kafka setting the idempotent
		// producer refuses) is retried and logged as a failed write is:
		// the record waits, its key's later records behind it.
		pr, err := c.parkingProducer()
		if err == nil {
			err = deadletter.ProduceAcked(ctx, pr, copyOf)
		}
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log := p.log.Debug
		if !failed {
			log, failed = p.log.Error, true
		}
		log("parking a record failed; writing it again (the key's records wait, other keys go on)", "topic", j.key.topic, "partition", j.key.partition,
			"offset", j.o, "parking_topic", op.Record.ParkTopic, "error", textsafe.Escape(err.Error()))
		p.sleepOrKeyOp(ctx, backoff)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if again, ok := p.parkFor(j); !ok || again.Record.ParkTopic != op.Record.ParkTopic {
			// Unparked (or parked elsewhere) meanwhile: the record is
			// handled as the key's operation now says.
			return errParkChanged
		}
		backoff = min(2*max(backoff, time.Millisecond), c.cfg.Retry.MaxBackoff)
	}
}

// errParkChanged: the park a record was being parked under is gone; the
// caller handles the record afresh.
var errParkChanged = fmt.Errorf("consumer: the key's park changed while its record was being parked")

// parkingProducer is the producer parked records are written with, made
// at the first park (settings as the dead-letter producer's: acks=all,
// idempotent, one record per batch).
func (c *Consumer) parkingProducer() (*kafka.Producer, error) {
	c.parking.mu.Lock()
	defer c.parking.mu.Unlock()
	if c.parking.p != nil {
		return c.parking.p, nil
	}
	pr, logs, err := newDeadLetterProducer(c.cfg.Kafka, c.log.Named("librdkafka").Named("parking"))
	if err != nil {
		return nil, fmt.Errorf("consumer: create the parking producer: %w", err)
	}
	c.parking.p, c.parking.logs = pr, logs
	return pr, nil
}

// closeParking closes the parking producer, if one was made.
func (c *Consumer) closeParking() {
	c.parking.mu.Lock()
	defer c.parking.mu.Unlock()
	if c.parking.p != nil {
		c.parking.p.Flush(5000)
		c.parking.p.Close()
		<-c.parking.logs
		c.parking.p = nil
	}
}

// setAside takes out of live (a batch's records, in batch order) the
// records of the keys that are parked or have an unpark's or a replay's
// prelude to run, and handles each such key on a goroutine of its own
// (settleAside): a copy the parking topic is slow to acknowledge, or a
// prelude, then holds its own key only, not the rest of the batch, whose
// call starts at once. It returns the records left for the BatchHandler,
// the keys set aside (released by their goroutines, not by the batch), and
// a wait for the goroutines, which the batch calls before it returns: its
// worker then releases every key of the batch.
func (p *pipeline) setAside(b *batch, live []*job) (rest []*job, aside map[jobKey]bool, wait func()) {
	// A key whose park ended while records of it were still queued to
	// its parker, or their copies on their way, waits for them first, as
	// in process: the parker gives those records back, with the batch's
	// own (their contexts end, and the call leaves them out).
	if p.parkers.Load() > 0 {
		for _, j := range live {
			_ = p.waitParkedCopies(&j.ctx, j.key)
		}
	}
	if !p.hasKeyOps() {
		return live, nil, func() {}
	}
	var jobs map[jobKey][]*job
	decided := make(map[jobKey]bool)
	rest = live[:0]
	for _, j := range live {
		set, seen := decided[j.key]
		if !seen {
			_, parked := p.parkFor(j)
			set = parked || !j.key.null && p.preludeSet(j.tp(), j.m.Key)
			decided[j.key] = set
		}
		if !set {
			rest = append(rest, j)
			continue
		}
		if jobs == nil {
			jobs, aside = make(map[jobKey][]*job), make(map[jobKey]bool)
		}
		jobs[j.key] = append(jobs[j.key], j)
		aside[j.key] = true
	}
	var wg sync.WaitGroup
	for k, js := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.settleAside(b, k, js)
		}()
	}
	return rest, aside, wg.Wait
}

// settleAside handles key k's records of batch b, in order, while the key
// is parked, and releases the key: the records parked are queued to the
// key's parker, which finishes them; once
// the key is found unparked (or replayed), its prelude runs and its
// records left go back to its queue for a later batch, not counted as an
// attempt. A record whose park or prelude cannot go on here is finished
// not done, which gives it back with its key's later records (finish).
func (p *pipeline) settleAside(b *batch, k jobKey, jobs []*job) {
	for len(jobs) > 0 {
		j := jobs[0]
		if _, ok := p.parkFor(j); ok {
			p.parkLater(j) // its key's parker finishes it
			jobs = jobs[1:]
			continue
		}
		// Unparked or replayed: those records run first.
		if err := p.preludeFirst(&j.ctx, j.tp(), j.m.Key, j.o); err != nil {
			p.finishJob(j, false)
			break
		}
		b.Release(k, jobs)
		return
	}
	b.Release(k, nil)
}
