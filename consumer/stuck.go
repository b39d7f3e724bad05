package consumer

import (
	"context"
	"time"

	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/schema"
)

// watchStuck reports ranges whose watermark has not moved for StuckTimeout
// while later records of the range have been fetched: one warning naming the
// record that holds it, a stuck/ key in etcd (under the member's lease) that
// keyshare status shows, and the keyshare_stuck_ranges metric. The report is
// withdrawn when the watermark moves.
func (p *pipeline) watchStuck() {
	every := min(time.Second, p.c.cfg.StuckTimeout/4)
	t := time.NewTicker(every)
	defer t.Stop()
	reported := make(map[string]schema.RangeState) // by range key
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		p.mu.Lock()
		reports := p.stuckReportsLocked(now, reported)
		p.mu.Unlock()
		p.publishStuck(reports, reported, now)
	}
}

// stuckReportsLocked looks at each range's watermark at now and returns
// the reports to make or withdraw: ranges stuck since the last look,
// ranges moving again, and ranges reported that are gone (released,
// dropped).
func (p *pipeline) stuckReportsLocked(now time.Time, reported map[string]schema.RangeState) []stuckReport {
	var reports []stuckReport
	for _, w := range p.mu.ranges {
		wm := w.st.Watermark()
		if r, ok := p.preludeReportLocked(w, now); ok {
			reports = append(reports, r)
		}
		if w.stuckByPrelude {
			w.lastWM, w.wmSince = wm, now // held by the prelude, not by a record of the range
			continue
		}
		if w.wmSince.IsZero() || wm != w.lastWM {
			w.lastWM, w.wmSince = wm, now
			if w.stuck {
				w.stuck = false
				reports = append(reports, stuckReport{rs: w.rs, clear: true})
			}
			continue
		}
		oldest, ok := w.st.Oldest()
		if w.stuck || !ok || now.Sub(w.wmSince) < p.c.cfg.StuckTimeout {
			continue
		}
		// Stuck: the watermark is held by an unfinished record and the
		// range has fetched past it.
		if w.st.Pending() < 2 && p.mu.pos[w.tp()] <= oldest+1 {
			continue
		}
		w.stuck = true
		rec := schema.StuckRecord{Offset: oldest, Since: w.wmSince}
		if j := p.mu.jobAt(w.tp(), oldest); j != nil {
			// Key and error are cut short (textsafe): the report must
			// fit in an etcd request whatever the record holds.
			rec.Key = textsafe.Bytes(j.m.Key)
			rec.Attempts, rec.Error = j.failures()
		}
		reports = append(reports, stuckReport{rs: w.rs, rec: rec})
	}
	// Ranges that were reported and are gone (released, dropped).
	for k, rs := range reported {
		if w := p.mu.ranges[k]; w == nil || !w.stuck {
			reports = append(reports, stuckReport{rs: rs, clear: true})
		}
	}
	return reports
}

// publishStuck writes reports to etcd and the log, keeping reported (the
// ranges whose report stands) up to date; a withdrawal of a range not
// reported is dropped.
func (p *pipeline) publishStuck(reports []stuckReport, reported map[string]schema.RangeState, now time.Time) {
	for _, r := range reports {
		if r.clear {
			if _, ok := reported[r.rs.Key]; !ok {
				continue
			}
			delete(reported, r.rs.Key)
		} else {
			reported[r.rs.Key] = r.rs
		}
		t := r.rs.Record
		ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
		if r.clear {
			p.log.Info("range no longer stuck", "topic", t.Topic, "partition", t.Partition, "range", t.Range().String())
			_ = p.sess.ClearStuck(ctx, r.rs)
		} else {
			p.warnStuck(r.rs, r.rec, now)
			if err := p.sess.SetStuck(ctx, r.rs, r.rec); err != nil {
				// Only the log and the metric show it then: say so.
				p.log.Warn("could not write the stuck report to etcd; keyshare status will not show it", "range", t.Range().String(), "error", err)
			}
		}
		cancel()
	}
}

// preludeReportLocked is the report of range w while a prelude (an
// unpark's or a replay's, prelude.go) on its hash space has been retrying
// one record for StuckTimeout: that record is its key's stuck record,
// whether or not a live record of the key waits behind it; and the
// report's withdrawal once no such record fails. ok is false when
// nothing changes.
func (p *pipeline) preludeReportLocked(w *owned, now time.Time) (r stuckReport, ok bool) {
	var failing *preludeRun
	for run, h := range p.mu.preludes[w.tp()] {
		if run.failing != nil && w.st.Range().Contains(h) {
			failing = run
			break
		}
	}
	switch {
	case failing != nil && !w.stuck && now.Sub(failing.failing.since) >= p.c.cfg.StuckTimeout:
		w.stuck, w.stuckByPrelude = true, true
		f := failing.failing
		// Its offset is the record's in the key's own partition, so that
		// key describe finds the key there.
		return stuckReport{rs: w.rs, rec: schema.StuckRecord{Offset: f.offset, Since: f.since, Key: textsafe.Bytes(failing.key),
			Attempts: f.attempts, Error: textsafe.Cut(f.describe(failing.op), 512)}}, true
	case failing == nil && w.stuckByPrelude:
		w.stuck, w.stuckByPrelude = false, false
		return stuckReport{rs: w.rs, clear: true}, true
	}
	return stuckReport{}, false
}

// stuckReport is a stuck report to write, or with clear to withdraw.
type stuckReport struct {
	rs    schema.RangeState
	rec   schema.StuckRecord
	clear bool
}

// warnStuck logs range rs held by rec. A record with no failed attempt
// has no error to show: the line says what holds it instead (a handler
// still running, or a record this member has not run), not error="".
func (p *pipeline) warnStuck(rs schema.RangeState, rec schema.StuckRecord, now time.Time) {
	t := rs.Record
	msg, args := "range held by a stuck record", []any{"topic", t.Topic, "partition", t.Partition, "range", t.Range().String(),
		"offset", rec.Offset, "key", rec.Key, "for", now.Sub(rec.Since).Round(time.Second), "attempts", rec.Attempts}
	switch {
	case rec.Error != "":
		args = append(args, "error", rec.Error)
	case rec.Key == "" && rec.Attempts == 0:
		msg += ", not running here (not fetched again yet, or queued behind its key)"
	default:
		msg += ", its handler running with no attempt failed yet"
	}
	p.log.Warn(msg, args...)
}
