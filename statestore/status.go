package statestore

import (
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// What a Store says about itself: the restores under way, for a status
// page, /readyz and metrics.

// RestoreStatus is a range whose state is being restored.
type RestoreStatus struct {
	Topic     string
	Partition int32
	Lo, Hi    uint64
	Token     int64
	Next      int64 // the next changelog offset to read
	End       int64 // the changelog's end offset the restore reads to; -1 until read
	Since     time.Time
}

// Restoring returns the ranges whose state is being restored now.
func (s *Store) Restoring() []RestoreStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []RestoreStatus
	for _, list := range s.held {
		for _, g := range list {
			if g.progress.done.Load() {
				continue
			}
			out = append(out, RestoreStatus{Topic: g.topic, Partition: g.partition, Lo: g.rng.Lo, Hi: g.rng.Hi, Token: g.token,
				Next: g.progress.next.Load(), End: g.progress.end.Load(), Since: g.progress.started})
		}
	}
	return out
}

// Ready returns an error while a range's state is being restored (its
// records wait), naming the ranges and how far each has read: for a
// member's /readyz.
func (s *Store) Ready() error {
	rs := s.Restoring()
	if len(rs) == 0 {
		return nil
	}
	parts := make([]string, 0, min(len(rs), 3))
	for _, r := range rs[:min(len(rs), 3)] {
		parts = append(parts, fmt.Sprintf("%s/%d [%d,%d) %d of %d changelog records read", r.Topic, r.Partition, r.Lo, r.Hi, r.Next, r.End))
	}
	more := ""
	if len(rs) > 3 {
		more = fmt.Sprintf(", and %d more", len(rs)-3)
	}
	return fmt.Errorf("restoring the state of %d ranges: %s%s", len(rs), strings.Join(parts, "; "), more)
}

// Collector returns the Store's metrics: the ranges restoring and the
// changelog records they have left to read, and counters of restores,
// skipped records, changes and repairs.
func (s *Store) Collector() prometheus.Collector { return storeCollector{s} }

var (
	descRestoring = prometheus.NewDesc("keyshare_state_restoring_ranges", "Ranges whose keyed state is being restored from the changelog; their records wait.", nil, nil)
	descRemaining = prometheus.NewDesc("keyshare_state_restore_remaining_records", "Changelog records the restores under way have left to read.", nil, nil)
	descRestores  = prometheus.NewDesc("keyshare_state_restores_total", "Ranges whose keyed state was restored from the changelog.", nil, nil)
	descFromCopy  = prometheus.NewDesc("keyshare_state_restores_from_copy_total", "Of the restores, those from the member's own copy on disk and the changelog's tail (Config.Dir).", nil, nil)
	descSkipped   = prometheus.NewDesc("keyshare_state_skipped_total", "Records done without their handler: their key had applied them (a re-run after a crash or a handoff).", nil, nil)
	descChanges   = prometheus.NewDesc("keyshare_state_changes_total", "Changes of keyed state appended to the changelog and acknowledged.", nil, nil)
	descRepairs   = prometheus.NewDesc("keyshare_state_repairs_total", "Keys whose state was appended again over a late change of a member that had lost the range.", nil, nil)
)

type storeCollector struct{ s *Store }

func (c storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRestoring, descRemaining, descRestores, descFromCopy, descSkipped, descChanges, descRepairs} {
		ch <- d
	}
}

func (c storeCollector) Collect(ch chan<- prometheus.Metric) {
	rs := c.s.Restoring()
	var remaining int64
	for _, r := range rs {
		if r.End >= 0 {
			remaining += max(0, r.End-r.Next)
		}
	}
	st := c.s.Stats()
	ch <- prometheus.MustNewConstMetric(descRestoring, prometheus.GaugeValue, float64(len(rs)))
	ch <- prometheus.MustNewConstMetric(descRemaining, prometheus.GaugeValue, float64(remaining))
	ch <- prometheus.MustNewConstMetric(descRestores, prometheus.CounterValue, float64(st.Restores))
	ch <- prometheus.MustNewConstMetric(descFromCopy, prometheus.CounterValue, float64(st.FromCopy))
	ch <- prometheus.MustNewConstMetric(descSkipped, prometheus.CounterValue, float64(st.Skipped))
	ch <- prometheus.MustNewConstMetric(descChanges, prometheus.CounterValue, float64(st.Changes))
	ch <- prometheus.MustNewConstMetric(descRepairs, prometheus.CounterValue, float64(st.Repairs))
}
