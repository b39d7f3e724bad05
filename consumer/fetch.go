package consumer

import (
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// The fetch loop: the only goroutine that drives the fetcher.

// fetchLoop owns the Kafka consumer: it applies assignment changes, polls,
// filters and dispatches records, and pauses fetching at the in-flight bound.
// It waits for no etcd or Kafka round trip (reconcile.go): what must be
// read is read by goroutines, whose answers it applies here.
func (p *pipeline) fetchLoop() error {
	defer p.unassignAll()
	p.goFunc(p.rereadLoop)
	for p.ctx.Err() == nil {
		select {
		case a := <-p.sess.Updates():
			if err := p.reconcile(a); err != nil {
				return err
			}
		case a := <-p.reread:
			if err := p.applyReread(a); err != nil {
				return err
			}
		case ans := <-p.startsCh:
			if err := p.startsRead(ans); err != nil {
				return err
			}
		case <-p.retentionCh:
			p.retention()
		case b := <-p.logBounds:
			p.retentionRead(b)
		case st := <-p.sess.PauseUpdates():
			p.hold(st)
		default:
		}
		if err := p.reapplyAfterRelease(); err != nil {
			return err
		}
		if err := p.refetchShelved(); err != nil {
			return err
		}
		if p.backpressure() {
			// Wait for a record to finish (or for updates and the pause
			// check).
			t := time.NewTimer(10 * time.Millisecond)
			select {
			case <-p.space:
			case <-t.C:
			case <-p.ctx.Done():
			}
			t.Stop()
			continue
		}
		ev := p.kc.Poll(50)
		if ev == nil {
			continue
		}
		if ev = p.burst(ev); ev != nil {
			if err := p.event(ev); err != nil {
				return err
			}
		}
	}
	return nil
}

// reapplyAfterRelease applies the latest assignment again when a drain
// released a range that the assignment already lists at a newer record
// (rangeTable.dropReleased): the leader handed it back, or revoked it
// again, before the release's answer came, and no later assignment need
// come to take it up.
func (p *pipeline) reapplyAfterRelease() error {
	p.mu.Lock()
	again := p.mu.reapply
	p.mu.reapply = false
	p.mu.Unlock()
	if !again {
		return nil
	}
	return p.reconcile(p.latest)
}

// burst takes the records librdkafka has queued, starting with first, one
// after the other, without the channels of the fetch loop between them,
// and hands them to handle together: the pipeline's lock and the
// scheduler's are taken once for the burst, not once per record, where
// the workers coming back for the next record take them too. It returns
// the event that ended the burst, if it was not a record.
//
// A burst takes no more records than there is room for under the in-flight
// bounds when it begins (burstRoom), so it keeps them as a record at a time
// did, and at most pollBurst. Its records count as fetched when it began:
// one clock read per burst rather than one per record.
func (p *pipeline) burst(first kafka.Event) (next kafka.Event) {
	at := time.Now()
	records, bytes := p.burstRoom()
	msgs := p.msgs[:0]
	for next = first; next != nil; next = p.kc.Poll(0) {
		m, ok := next.(*kafka.Message)
		if !ok {
			break
		}
		msgs = append(msgs, m)
		records--
		bytes -= recordBytes(m)
		if records == 0 || bytes <= 0 {
			next = nil
			break
		}
	}
	if len(msgs) > 0 {
		p.handle(msgs, at)
	}
	clear(msgs) // the records are the workers' now
	p.msgs = msgs[:0]
	return next
}

// pollBurst bounds the records the fetch loop takes in a row before it
// looks at its channels (assignment changes, the group's pause) again:
// about a millisecond of records.
const pollBurst = 256

// event applies one event from librdkafka other than a record.
func (p *pipeline) event(ev kafka.Event) error {
	switch ev := ev.(type) {
	case kafka.PartitionEOF:
		p.partitionEOF(ev)
	case kafka.Error:
		if ev.IsFatal() {
			return fmt.Errorf("consumer: fatal Kafka error: %w", ev)
		}
		if ev.Code() == kafka.ErrAutoOffsetReset {
			p.retention()
			return nil
		}
		p.log.Warn("kafka", "error", ev, "retriable", ev.IsRetriable())
	}
	return nil
}

// reassign makes librdkafka fetch parts from their offsets by unassigning
// and assigning them: unlike a seek, it works on a partition whose fetching
// librdkafka has stopped.
func (p *pipeline) reassign(parts []kafka.TopicPartition) error {
	if err := p.kc.IncrementalUnassign(parts); err != nil {
		return fmt.Errorf("unassign: %w", err)
	}
	if err := p.kc.IncrementalAssign(parts); err != nil {
		return fmt.Errorf("assign: %w", err)
	}
	p.syncPause(parts)
	return nil
}

// syncPause sets librdkafka's pause flag of freshly assigned partitions to
// the pipeline's: the flag outlives unassign and assign, so a partition
// paused by an earlier session would otherwise stay paused for good.
func (p *pipeline) syncPause(parts []kafka.TopicPartition) {
	p.mu.Lock()
	paused := p.mu.paused
	p.mu.Unlock()
	if paused {
		_ = p.kc.Pause(parts)
	} else if err := p.kc.Resume(parts); err != nil {
		p.log.Warn("resume newly assigned partitions", "error", err)
	}
}

// unassignAll stops fetching everything.
func (p *pipeline) unassignAll() {
	p.mu.Lock()
	var parts []kafka.TopicPartition
	for t := range p.mu.assigned {
		topic := t.Topic
		parts = append(parts, kafka.TopicPartition{Topic: &topic, Partition: t.Partition})
	}
	p.mu.assigned = make(map[tp]bool)
	p.mu.Unlock()
	if len(parts) > 0 {
		_ = p.kc.Resume(parts) // the flag outlives the assignment (see reconcile)
		if err := p.kc.IncrementalUnassign(parts); err != nil {
			p.log.Debug("unassign", "error", err)
		}
	}
}

// kafkaParts converts a fetch plan's partitions for the fetcher.
func kafkaParts(ps []partitionOffset) []kafka.TopicPartition {
	var out []kafka.TopicPartition
	for _, po := range ps {
		topic := po.Topic
		out = append(out, kafka.TopicPartition{Topic: &topic, Partition: po.Partition, Offset: kafka.Offset(po.offset)})
	}
	return out
}

// applyFetch makes the fetcher fetch what plan says (reconcileTable's
// plan for assignment generation gen).
func (p *pipeline) applyFetch(plan fetchPlan, gen int64) error {
	assign, unassign, seeks := kafkaParts(plan.assign), kafkaParts(plan.unassign), kafkaParts(plan.seek)
	if len(unassign) > 0 {
		if err := p.kc.IncrementalUnassign(unassign); err != nil {
			return fmt.Errorf("consumer: unassign %v: %w", unassign, err)
		}
	}
	if len(assign) > 0 {
		if err := p.kc.IncrementalAssign(assign); err != nil {
			return fmt.Errorf("consumer: assign: %w", err)
		}
		p.syncPause(assign)
	}
	if len(seeks) > 0 {
		// SeekPartitions returns once no record fetched before the seek
		// can be delivered any more.
		out, err := p.kc.SeekPartitions(seeks)
		if err != nil {
			return fmt.Errorf("consumer: seek: %w", err)
		}
		// A partition librdkafka stopped (its offset was deleted, and the
		// error is still on its way to the fetch loop) refuses a seek.
		var refused []kafka.TopicPartition
		for _, r := range out {
			if r.Error != nil {
				p.log.Debug("seek refused; assigning the partition again", "topic", *r.Topic, "partition", r.Partition, "offset", r.Offset, "error", r.Error)
				refused = append(refused, kafka.TopicPartition{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset})
			}
		}
		if len(refused) > 0 {
			if err := p.reassign(refused); err != nil {
				return fmt.Errorf("consumer: restart partitions %v: %w", refused, err)
			}
		}
	}
	if len(assign)+len(unassign)+len(seeks) > 0 {
		p.log.Debug("fetch assignment changed", "assigned", len(assign), "unassigned", len(unassign), "seeks", len(seeks), "generation", gen)
	}
	return nil
}
