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
	p.mu.Unlock()
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
		if !paused && time.Since(p.boundSince) >= pauseAfter && len(parts) > 0 {
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
		p.setPaused(false)
	}
	return false
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
