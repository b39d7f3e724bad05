package consumer

import (
	"sync"
	"time"
)

// The backlog figures: how far a group is behind, for dashboards and
// autoscalers (docs/operations.md, "Autoscaling"). Only the leader learns
// the partitions' end and committed offsets, so only it has them; they are
// sampled when the metrics are gathered, at most once per
// backlogSampleSpacing, so the scrape interval sets their resolution.
const (
	// backlogSampleSpacing is the least time between two samples, so that
	// several scrapers do not crowd the history.
	backlogSampleSpacing = 5 * time.Second
	// backlogRateWindow is the span the rates are measured over, once the
	// history is that long.
	backlogRateWindow = time.Minute
	// backlogMaxSamples bounds a partition's history; beyond it every
	// other sample goes, so the history keeps its span at a coarser step.
	backlogMaxSamples = 512
)

// offsetSample is a partition's end and committed offsets at one time.
type offsetSample struct {
	at             time.Time
	end, committed int64
}

// backlogFigures is a group's backlog at one time.
type backlogFigures struct {
	// Records is the sum over partitions of end − committed: the records
	// the group has not yet handled and committed.
	Records int64
	// AgeSeconds is, over partitions, the longest time since the first
	// uncommitted record arrived, as the samples bound it: no less than
	// since the first sample that showed it in the log. 0 without a
	// backlog.
	AgeSeconds float64
	// ArrivalPerSec and DrainPerSec are the records per second appended
	// to the partitions and committed, over about backlogRateWindow; 0
	// until a partition has two samples.
	ArrivalPerSec, DrainPerSec float64
}

// backlogHistory keeps each partition's offset samples.
type backlogHistory struct {
	mu    sync.Mutex
	parts map[tp][]offsetSample
}

// observe adds the partitions' offsets at now (those whose end is known;
// partitions not given are forgotten) and returns the group's figures.
func (h *backlogHistory) observe(now time.Time, parts map[tp]partitionGauges) backlogFigures {
	h.mu.Lock()
	defer h.mu.Unlock()
	next := make(map[tp][]offsetSample, len(parts))
	var f backlogFigures
	for t, g := range parts {
		if g.end < 0 {
			continue
		}
		s := offsetSample{at: now, end: g.end, committed: g.committed}
		hist := h.parts[t]
		if len(hist) == 0 || now.Sub(hist[len(hist)-1].at) >= backlogSampleSpacing {
			hist = prune(append(hist, s), now)
		}
		next[t] = hist
		backlog, age, arrival, drain := partitionBacklog(hist, s, now)
		f.Records += backlog
		f.AgeSeconds = max(f.AgeSeconds, age)
		f.ArrivalPerSec += arrival
		f.DrainPerSec += drain
	}
	h.parts = next
	return f
}

// partitionBacklog is a partition's backlog at now, from its history
// (oldest first) and its current offsets: the records between committed
// and end, how long ago the first sample showed the first of them in the
// log, and the records appended and committed per second since the newest
// sample at least backlogRateWindow old (or the oldest).
func partitionBacklog(hist []offsetSample, cur offsetSample, now time.Time) (backlog int64, ageSeconds, arrival, drain float64) {
	backlog = max(0, cur.end-cur.committed)
	if backlog > 0 {
		for _, s := range hist {
			if s.end > cur.committed {
				ageSeconds = now.Sub(s.at).Seconds()
				break
			}
		}
	}
	if len(hist) == 0 {
		return backlog, ageSeconds, 0, 0
	}
	from := hist[0]
	for _, s := range hist {
		if now.Sub(s.at) >= backlogRateWindow {
			from = s
		}
	}
	if secs := now.Sub(from.at).Seconds(); secs > 0 {
		arrival = max(0, float64(cur.end-from.end)/secs)
		drain = max(0, float64(cur.committed-from.committed)/secs)
	}
	return backlog, ageSeconds, arrival, drain
}

// prune drops the samples neither the age nor the rates need: those
// before the last sample whose end was at or below the latest committed
// offset (the backlog's records arrived after it) and older than the rate
// window. Past backlogMaxSamples it keeps every other sample, and the
// latest.
func prune(hist []offsetSample, now time.Time) []offsetSample {
	committed := hist[len(hist)-1].committed
	first := 0
	for i, s := range hist {
		if s.end <= committed && now.Sub(s.at) > backlogRateWindow {
			first = i
		}
	}
	hist = hist[first:]
	if len(hist) > backlogMaxSamples {
		thin := hist[:0:0]
		for i, s := range hist {
			if i%2 == 0 || i == len(hist)-1 {
				thin = append(thin, s)
			}
		}
		hist = thin
	}
	return hist
}
