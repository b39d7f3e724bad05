package consumer

import (
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Offsets without a record.
//
// Not every offset of a partition holds a record its reader is given:
// transaction markers never reach the application, records of aborted
// transactions are dropped by librdkafka under read_committed, and the log
// cleaner removes records of a compacted topic. A range's next only moves
// when a record is observed, so without help the ledger would stop before
// such offsets when they are at the end of the log (and an inherited
// pending offset whose record was compacted away would hold the watermark
// forever). keyshare learns that offsets are absent from two facts about
// librdkafka (see docs/consumer.md, "Offsets without a record"):
//
//   - it delivers every record of a partition it reads, in offset order,
//     from the position it was assigned or sought to (keyshare filters by
//     hash itself), so a delivered record at o, after the fetch position
//     pos, proves that [pos, o) holds no record for this reader;
//   - with enable.partition.eof it reports the end of the partition — the
//     high watermark, or the last stable offset under read_committed — once
//     every record below it has been delivered, so [pos, end) holds none.
//
// Both go to ledger.State.Skip for every range of the partition that takes
// records (a revoking range does not: its next owner reads the gap itself).

// skipAbsentLocked records that the fetcher of t, whose next offset was
// p.mu.pos[t], found no record below to.
func (p *pipeline) skipAbsentLocked(t tp, to int64) {
	p.fetchingAgainLocked(t)
	if from, ok := p.mu.pos[t]; ok {
		p.skipRangesLocked(t, p.mu.byTP[t], from, to)
	}
}

// fetchingAgainLocked forgets that t's position is above its log end (a
// record or the end of the partition came from it).
func (p *pipeline) fetchingAgainLocked(t tp) {
	if p.mu.aboveEnd[t] != nil {
		delete(p.mu.aboveEnd, t)
	}
}

// skipRangesLocked records in partition t's ranges that take records
// that the offsets from from up to to hold none.
func (p *pipeline) skipRangesLocked(t tp, ranges []*owned, from, to int64) {
	if to <= from {
		return
	}
	for _, w := range ranges {
		if w.revoking {
			continue
		}
		if dropped := w.st.Skip(from, to); len(dropped) > 0 {
			p.log.Info("pending records are no longer in the log (compacted away); nothing to handle for them",
				"topic", t.Topic, "partition", t.Partition, "range", w.st.Range().String(),
				"offsets", dropped, "fetched_from", from, "next_record", to)
		}
	}
}

// partitionEOF handles librdkafka's end-of-partition event: every record
// below its offset has been delivered, so the offsets from the fetch
// position up to it hold none for this reader (markers, an aborted or still
// open transaction's place under read_committed, compacted records).
func (p *pipeline) partitionEOF(ev kafka.PartitionEOF) {
	if ev.Topic == nil || ev.Offset < 0 {
		return
	}
	t := tp{Topic: *ev.Topic, Partition: ev.Partition}
	end := int64(ev.Offset)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.mu.fetching || !p.mu.assigned[t] {
		return
	}
	p.skipAbsentLocked(t, end)
	if end > p.mu.pos[t] {
		p.mu.pos[t] = end
	}
}

// AboveLogEnd is a partition whose fetch position is above its log end: the
// group's ledger (or committed offset) is ahead of the log, because the log
// was truncated (an unclean leader election) or the topic was deleted and
// created again. keyshare does not fetch it and does not move back on its
// own: going back would run records again, or apply the old ledger to a new
// log. An operator decides (docs/consumer.md, "A fetch position above the
// log end").
type AboveLogEnd struct {
	Topic     string
	Partition int32
	Position  int64 // where the group is
	LogEnd    int64 // the partition's end when it was found
	Since     time.Time
}

// checkAboveEnd is called by retention for a partition whose fetch failed
// as out of range (or that may have): at is its fetch position and high the
// log end that Kafka reports. A position above the end is logged once, and
// shown in Status().AboveLogEnd until records are fetched again.
func (p *pipeline) checkAboveEnd(t tp, at, high int64) {
	if at <= high {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.mu.assigned[t] || p.mu.aboveEnd[t] != nil {
		return
	}
	if p.mu.aboveEnd == nil {
		p.mu.aboveEnd = make(map[tp]*AboveLogEnd)
	}
	p.mu.aboveEnd[t] = &AboveLogEnd{Topic: t.Topic, Partition: t.Partition, Position: at, LogEnd: high, Since: time.Now()}
	p.log.Error("the group's position is above the partition's log end; keyshare stops fetching the partition rather than go back on its own. "+
		"If the log was truncated, or the topic was deleted and created again, the group's state for it is stale: "+
		"check the topic, then clear the group's ledger and committed offset for the partition (docs/consumer.md, \"A fetch position above the log end\") and restart the members",
		"topic", t.Topic, "partition", t.Partition, "position", at, "log_end", high)
}
