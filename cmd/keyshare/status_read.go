package main

import (
	"slices"
	"strings"
	"time"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/schema"
)

// membersStatus is a row per member, sorted by id: its registration, its
// lease's time left (ttls, by lease), the end of its latest load report
// and the rate it measured (byMember).
func membersStatus(snap *schema.Snapshot, reports []schema.LoadReport, ttls map[int64]int64, byMember map[string]float64) []memberStatus {
	lastSeen := map[string]time.Time{}
	for _, r := range reports {
		lastSeen[r.Member] = r.At
	}
	var out []memberStatus
	for _, m := range snap.Members {
		ms := memberStatus{ID: m.ID, Host: m.Host, PID: m.PID, Weight: m.Weight, Started: m.Started, Leaving: m.Leaving}
		if t, ok := ttls[m.Lease]; ok {
			ms.LeaseTTL = &t
		}
		if t, ok := lastSeen[m.ID]; ok {
			ms.LastSeen = &t
		}
		if r, ok := byMember[m.ID]; ok {
			ms.RecordsPerSec = &r
		}
		out = append(out, ms)
	}
	slices.SortFunc(out, func(a, b memberStatus) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// partitionReads is what readStatus read that a partition's row is built
// from.
type partitionReads struct {
	snap       *schema.Snapshot
	byTP       map[assign.TopicPartition][]schema.RangeState
	marks      map[assign.TopicPartition]int64 // safe watermarks
	rateOfTP   map[assign.TopicPartition]float64
	hot        map[reportedRange][]hotKeyStatus
	stuckSince map[rangeKey]time.Time
	// committed and ends are the group's committed offsets and the log
	// end offsets, read when withKafka.
	committed, ends map[assign.TopicPartition]int64
	withKafka       bool
}

func newPartitionReads(snap *schema.Snapshot, rateOfTP map[assign.TopicPartition]float64, hot map[reportedRange][]hotKeyStatus) *partitionReads {
	pr := &partitionReads{snap: snap, byTP: snap.Partitions(), marks: snap.Watermarks(), rateOfTP: rateOfTP, hot: hot, stuckSince: map[rangeKey]time.Time{}}
	for _, s := range snap.Stuck {
		pr.stuckSince[rangeKey{s.Topic, s.Partition, s.Lo}] = s.Since
	}
	return pr
}

// partitions is the partitions with ranges, sorted.
func (pr *partitionReads) partitions() []assign.TopicPartition {
	var tps []assign.TopicPartition
	for tp := range pr.byTP {
		tps = append(tps, tp)
	}
	slices.SortFunc(tps, func(a, b assign.TopicPartition) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	return tps
}

// status is tp's row: its ranges, and its offsets and lag.
func (pr *partitionReads) status(tp assign.TopicPartition) partitionStatus {
	ps := partitionStatus{Topic: tp.Topic, Partition: tp.Partition}
	if w, ok := pr.marks[tp]; ok {
		ps.Safe = &w
	}
	if r, ok := pr.rateOfTP[tp]; ok {
		ps.RecordsPerSec = &r
	}
	for _, r := range pr.byTP[tp] {
		ps.Ranges = append(ps.Ranges, pr.rangeStatus(tp, r, &ps))
	}
	if hi, ok := pr.ends[tp]; ok {
		ps.End = &hi
	}
	if c, ok := pr.committed[tp]; ok && c >= 0 {
		ps.Committed = &c
	}
	if ps.End != nil && pr.withKafka {
		base := int64(0)
		if ps.Committed != nil {
			base = *ps.Committed
		}
		lag := *ps.End - base
		ps.Lag = &lag
		if parts, ok := splitLag(base, ps.Safe, ps.Fetched, *ps.End); ok {
			ps.LagParts = &parts
		}
	}
	return ps
}

// rangeStatus is range r's row; it adds the range's pending records and
// fetch position to its partition's, ps.
func (pr *partitionReads) rangeStatus(tp assign.TopicPartition, r schema.RangeState, ps *partitionStatus) rangeStatus {
	_, live := pr.snap.Members[r.Record.Owner]
	rs := rangeStatus{Lo: r.Record.Lo, Hi: r.Record.Hi, Owner: r.Record.Owner, OwnerGone: !live, State: r.Record.State, Target: r.Record.Target, Pending: r.Entry.PendingCount()}
	rs.HotKeys = pr.hot[reportedRange{r.Record.Owner, tp.Topic, tp.Partition, r.Record.Lo, r.Record.Hi}]
	if t, ok := pr.stuckSince[rangeKey{tp.Topic, tp.Partition, r.Record.Lo}]; ok {
		rs.WatermarkSince = &t
	}
	ps.Pending += rs.Pending
	if w, ok := r.Entry.Watermark(); ok {
		rs.Watermark = &w
		for _, seg := range r.Entry.Segments {
			if ps.Fetched == nil || seg.Next < *ps.Fetched {
				n := seg.Next
				ps.Fetched = &n
			}
		}
	}
	return rs
}
