package consumer

import (
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/coord"
)

// Backpressure: the in-flight bounds, and an operator's pause.

// pauseAfter is how long the member may sit at the in-flight bound before
// it pauses its partitions in librdkafka.
const pauseAfter = 500 * time.Millisecond

// backpressure applies the in-flight bounds (MaxInFlight records,
// MaxInFlightBytes bytes) and reports whether the fetch loop must not take
// more records now. At a bound the loop stops polling (librdkafka stops
// fetching once its own queue, queued.max.messages.kbytes, is full). Only
// if the member stays at a bound for pauseAfter — a slow key, not a burst
// — are the partitions paused in librdkafka, which drops its fetched queue
// and fetches again on resume: pausing on every burst made a member five
// times slower on Parallel Consumer's workload. Fetching resumes below
// half of both bounds.
func (p *pipeline) backpressure() bool {
	p.mu.Lock()
	// Unflushed completions count against the bound too: when etcd cannot
	// be written, the member stops taking records rather than pile up work
	// that a crash would run again.
	inflight, inBytes, paused, held := p.mu.inflight, p.mu.inflightBytes, p.mu.paused, p.mu.held
	if p.mu.unflushed >= p.c.cfg.MaxUnflushed {
		inflight = max(inflight, p.c.cfg.MaxInFlight) // at the bound either way
	}
	limit, byteLimit := p.c.cfg.MaxInFlight, p.c.cfg.MaxInFlightBytes
	// A record is taken below the byte bound whatever its size, so one
	// larger than the bound still runs, alone.
	atBound := inflight >= limit || inBytes >= byteLimit
	var parts []kafka.TopicPartition
	if atBound || paused || held {
		for t := range p.mu.assigned {
			parts = append(parts, kafka.TopicPartition{Topic: &t.Topic, Partition: t.Partition})
		}
	}
	var overShare, underShare []kafka.TopicPartition
	if !paused && !held {
		overShare, underShare = p.sharesLocked(inflight, limit)
	}
	sharing := len(p.mu.shares.paused) > 0
	p.mu.Unlock()
	p.applyShares(overShare, underShare)
	if !atBound {
		p.boundSince = time.Time{}
	}
	switch {
	case held:
		// Paused by an operator: take nothing, and let librdkafka stop
		// fetching at once. In-flight records finish and are flushed.
		if !paused && len(parts) > 0 {
			if err := p.kc.Pause(parts); err != nil {
				p.log.Warn("pause", "error", err)
			} else {
				p.setPaused(true)
			}
		}
		return true
	case atBound:
		if !held && p.evictBlocked() {
			return false // blocked keys' records left memory: there is room (blocked.go)
		}
		if p.boundSince.IsZero() {
			p.boundSince = time.Now()
		}
		// While partitions are paused for their share, the others go
		// on taking the slots those free: pausing them too would hand
		// the slots back to whoever librdkafka delivers first.
		if !paused && !sharing && time.Since(p.boundSince) >= pauseAfter && len(parts) > 0 {
			if err := p.kc.Pause(parts); err != nil {
				p.log.Warn("pause", "error", err)
			} else {
				p.setPaused(true)
				p.log.Debug("paused fetching: at the in-flight bound for a while", "in_flight", inflight, "in_flight_bytes", inBytes)
			}
		}
		return true
	case paused && inflight <= limit/2 && inBytes <= byteLimit/2:
		if len(parts) > 0 {
			if err := p.kc.Resume(parts); err != nil {
				p.log.Warn("resume", "error", err)
				return false
			}
		}
		p.mu.Lock()
		clear(p.mu.shares.paused) // resumed with the rest
		p.mu.Unlock()
		p.setPaused(false)
	}
	return false
}

// The in-flight bound is shared by the member's partitions. Taken first
// come first served, a partition with a backlog of slow records takes every
// slot, and the slots its records free go back to it (librdkafka delivers
// the records it fetched for it first), so another partition waits until
// the backlog is gone. So each partition the member fetches has a share of
// MaxInFlight, MaxInFlight divided by the number of those partitions (at
// least one record). Once fewer than a share's slots are free and some
// partition with records waiting holds less than half its share (one with
// nothing to fetch wants no slot), every partition holding more
// than its share is paused in librdkafka, which drops what it fetched for
// it: the slots its records free go to the others. Records already in
// flight are never taken back. A paused partition is resumed once it holds
// no more than its share, or once it holds every record in flight and half
// the bound is free (the others took none of the slots it freed). What a
// partition does not use is lent: while a share's slots are free, any
// partition takes records, whatever it holds.

// partitionShares is the partitions paused for their share, in the
// pipeline's lock (rangeTable.shares).
type partitionShares struct {
	paused map[tp]bool
	// checked is when the partitions' holdings were last counted: at most
	// every shareCheckEvery, since counting walks the records in flight.
	checked time.Time
}

// shareCheckEvery bounds how often the fetch loop counts what each
// partition holds: a walk of up to MaxInFlight records.
const shareCheckEvery = 10 * time.Millisecond

// sharesLocked decides which partitions to pause for holding more than
// their share and which to resume, and records them in
// p.mu.shares. inflight and limit are the member's in-flight records and
// MaxInFlight. The caller holds p.mu and applies the answer (applyShares).
func (p *pipeline) sharesLocked(inflight, limit int) (pause, resume []kafka.TopicPartition) {
	sh := &p.mu.shares
	n := len(p.mu.assigned)
	share := max(1, limit/max(n, 1))
	short := inflight > limit-share // fewer than a share's slots free
	if len(sh.paused) == 0 && (!short || n < 2) {
		return nil, nil
	}
	now := time.Now()
	if now.Sub(sh.checked) < shareCheckEvery {
		return nil, nil
	}
	sh.checked = now
	held := make(map[tp]int, n)
	for t := range p.mu.assigned {
		for range p.mu.jobsOf(t) {
			held[t]++
		}
	}
	for t := range sh.paused {
		// Lent when the others hold nothing and half the bound is free:
		// they took none of the slots it freed.
		if !p.mu.assigned[t] || held[t] <= share || held[t] == inflight && inflight <= limit/2 {
			delete(sh.paused, t)
			if p.mu.assigned[t] {
				resume = append(resume, kafka.TopicPartition{Topic: &t.Topic, Partition: t.Partition})
			}
		}
	}
	if !short || n < 2 {
		return nil, resume
	}
	// Only while a partition is squeezed, holding less than half its
	// share with records waiting for it: evenly loaded partitions, each
	// near its share, are left alone (a pause drops what librdkafka
	// fetched for the partition), and so is one whose neighbours have
	// nothing to fetch, or it would be held to its share for nothing.
	squeezed := false
	for t := range p.mu.assigned {
		if held[t] < share/2 && p.recordsWaitingLocked(t) {
			squeezed = true
			break
		}
	}
	for t := range p.mu.assigned {
		if squeezed && held[t] > share && !sh.paused[t] {
			sh.paused[t] = true
			pause = append(pause, kafka.TopicPartition{Topic: &t.Topic, Partition: t.Partition})
		}
	}
	return pause, resume
}

// recordsWaitingLocked reports whether partition t is known to have
// records to fetch: its log end, as librdkafka's last fetch answer said (no
// request is made), is past the fetch position. Before the first answer
// librdkafka knows no log end, and the partition has sent no records
// either: it squeezes no one until an answer says it has some, which the
// next check sees. Counting it as waiting would pause a busy partition to
// its share, dropping what librdkafka fetched for it, for a partition just
// assigned or on a broker slow to answer.
func (p *pipeline) recordsWaitingLocked(t tp) bool {
	_, high, err := p.kc.GetWatermarkOffsets(t.Topic, t.Partition)
	if err != nil || high < 0 {
		return false
	}
	pos, known := p.mu.pos[t]
	return !known || high > pos
}

// applyShares pauses and resumes partitions in librdkafka for their share
// of the in-flight bound (sharesLocked).
func (p *pipeline) applyShares(pause, resume []kafka.TopicPartition) {
	if len(pause) > 0 {
		if err := p.kc.Pause(pause); err != nil {
			p.log.Warn("pause partitions over their share of the in-flight bound", "error", err)
		} else {
			p.log.Debug("paused partitions holding more than their share of the in-flight bound", "partitions", len(pause))
		}
	}
	if len(resume) > 0 {
		if err := p.kc.Resume(resume); err != nil {
			p.log.Warn("resume partitions back within their share of the in-flight bound", "error", err)
		}
	}
}

// burstRoom is how many records, and how many bytes of them, the fetch
// loop may take in one burst (fetch.go), the first whatever its size: as
// many as the in-flight bounds and the unflushed bound have room for, at
// most pollBurst; one while paused or held by an operator. Records only
// leave the in-flight counts while a burst is taken, so the in-flight
// bounds hold as they did when the loop looked at them after each record.
func (p *pipeline) burstRoom() (records int, bytes int64) {
	cfg := &p.c.cfg
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.held || p.mu.paused {
		return 1, 1
	}
	records = min(pollBurst, cfg.MaxInFlight-p.mu.inflight, cfg.MaxUnflushed-p.mu.unflushed)
	return max(records, 1), max(cfg.MaxInFlightBytes-p.mu.inflightBytes, 1)
}

// recordBytes is what a fetched record holds in memory, as far as
// MaxInFlightBytes counts it: its key, value and headers.
func recordBytes(m *kafka.Message) int64 {
	n := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}

// hold applies the group's pause state; backpressure does the rest.
func (p *pipeline) hold(st coord.PauseState) {
	p.mu.Lock()
	was, known := p.mu.held, p.mu.heldKnown
	p.mu.held, p.mu.heldKnown = st.Paused, true
	p.mu.Unlock()
	switch {
	case st.Paused && (!was || !known):
		p.log.Info("group paused by an operator: taking no records until it is resumed", "by", st.Record.By, "reason", st.Record.Reason)
	case !st.Paused && was && known:
		p.log.Info("group resumed")
	}
}

func (p *pipeline) setPaused(v bool) {
	p.mu.Lock()
	p.mu.paused = v
	p.mu.Unlock()
}
