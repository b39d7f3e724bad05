package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/schema"
)

// The arithmetic of keyshare status: pure functions of what was read from
// etcd and Kafka, so that each number the operator sees has a table test.

// lagParts splits a partition's lag, end − committed, into parts that sum to
// it exactly. The offsets run committed ≤ safe ≤ fetched ≤ end; a reading
// out of that order (etcd and Kafka are read at different instants) is
// clamped into it, so the parts never overlap and never go negative.
type lagParts struct {
	// Uncommitted is committed → safe watermark: handled and recorded in
	// etcd, not yet committed to Kafka (the leader commits it next).
	Uncommitted int64 `json:"uncommitted"`
	// Waiting is safe watermark → fetched: fetched, and behind the lowest
	// record not yet done (in flight, retried, or held by a pause).
	Waiting int64 `json:"waiting"`
	// Unfetched is fetched → end: not yet fetched by any owner.
	Unfetched int64 `json:"unfetched"`
}

// Sum is the lag the parts make up.
func (l lagParts) Sum() int64 { return l.Uncommitted + l.Waiting + l.Unfetched }

// splitLag splits end − committed. safe or fetched unknown (no ledger entry
// yet) count as committed: nothing past the committed offset is known to be
// handled or fetched. It returns false when there is no lag to split (end
// at or below committed).
func splitLag(committed int64, safe, fetched *int64, end int64) (lagParts, bool) {
	if end <= committed {
		return lagParts{}, false
	}
	clamp := func(v *int64, lo int64) int64 {
		if v == nil {
			return lo
		}
		return min(max(*v, lo), end)
	}
	s := clamp(safe, committed)
	f := clamp(fetched, s)
	return lagParts{Uncommitted: s - committed, Waiting: f - s, Unfetched: end - f}, true
}

// The group's states, as the state line names them: admin's (group list
// and describe name the same states by the same rule; TestGroupState holds
// groupState to admin.StateOf).
const (
	groupStable      = string(admin.Stable)      // every range active under a live member
	groupRebalancing = string(admin.Rebalancing) // ranges moving, or owned by members that are gone
	groupEmpty       = string(admin.Empty)       // no member registered
	groupPaused      = string(admin.Paused)      // keyshare group pause is in force
)

// groupState names the group's state from etcd's view of it and says why:
// Paused wins (nothing moves), then Empty (no member: ranges wait under
// owners that are gone), then Rebalancing (a range revoking or released, a
// range under a gone owner, a member leaving), else Stable.
func groupState(paused bool, members []memberStatus, parts []partitionStatus) (string, string) {
	if paused {
		return groupPaused, "members take no records"
	}
	if len(members) == 0 {
		if n := countRanges(parts, func(r rangeStatus) bool { return true }); n > 0 {
			return groupEmpty, fmt.Sprintf("no member registered; %s waiting for one", plural(n, "range"))
		}
		return groupEmpty, "no member registered"
	}
	var why []string
	if n := countRanges(parts, func(r rangeStatus) bool { return r.OwnerGone }); n > 0 {
		why = append(why, plural(n, "range")+" under an owner that is gone")
	}
	if n := countRanges(parts, func(r rangeStatus) bool { return !r.OwnerGone && r.State != schema.StateActive }); n > 0 {
		why = append(why, plural(n, "range")+" being handed over")
	}
	leaving := 0
	for _, m := range members {
		if m.Leaving {
			leaving++
		}
	}
	if leaving > 0 {
		why = append(why, plural(leaving, "member")+" leaving")
	}
	if len(why) > 0 {
		return groupRebalancing, strings.Join(why, ", ")
	}
	return groupStable, "every range active under a live member"
}

func countRanges(parts []partitionStatus, f func(rangeStatus) bool) int {
	n := 0
	for _, p := range parts {
		for _, r := range p.Ranges {
			if f(r) {
				n++
			}
		}
	}
	return n
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// loadRates sums the members' load reports: records handled per second by
// member and by partition, over each report's interval.
func loadRates(reports []schema.LoadReport) (byMember map[string]float64, byTP map[assign.TopicPartition]float64) {
	byMember = map[string]float64{}
	byTP = map[assign.TopicPartition]float64{}
	for _, r := range reports {
		byMember[r.Member] += 0
		for _, rl := range r.Ranges {
			byMember[r.Member] += rl.RecordsPerSec
			byTP[assign.TopicPartition{Topic: rl.Topic, Partition: rl.Partition}] += rl.RecordsPerSec
		}
	}
	return byMember, byTP
}

// hotKeyStatus is one of a range's busiest keys, as its owner's last load
// report measured it.
type hotKeyStatus struct {
	// Key is the key as text (escaped and cut by the member, textsafe);
	// null when the owner wrote no name for its hash (a member from
	// before hot key names).
	Key  *string `json:"key"`
	Hash uint64  `json:"hash"`
	// BusyPerSec is the worker-seconds per second its records held a
	// worker (a lower bound); Share is that over the range's busy/s.
	BusyPerSec float64 `json:"busy_per_sec"`
	Share      float64 `json:"share"`
}

// reportedRange names a range as its owner reported it.
type reportedRange struct {
	owner     string
	topic     string
	partition int32
	lo, hi    uint64
}

// hotKeysOf joins the members' load reports with the names of their hot
// keys: each reported range's notable hot keys (state.NotableHotKey, the
// rule members name them by), busiest first, by owner and range.
// A hash without a name keeps a nil Key.
func hotKeysOf(reports []schema.LoadReport, names map[string]schema.HotKeyNames) map[reportedRange][]hotKeyStatus {
	type hashOf struct {
		topic     string
		partition int32
		hash      uint64
	}
	out := map[reportedRange][]hotKeyStatus{}
	for _, r := range reports {
		byHash := map[hashOf]string{}
		for _, n := range names[r.Member].Keys {
			byHash[hashOf{n.Topic, n.Partition, n.Hash}] = n.Key
		}
		for _, rl := range r.Ranges {
			for _, h := range rl.Hot {
				if !schema.NotableHotKey(h.BusyPerSec, rl.BusyPerSec) {
					continue
				}
				hk := hotKeyStatus{Hash: h.Hash, BusyPerSec: h.BusyPerSec}
				if rl.BusyPerSec > 0 {
					hk.Share = min(h.BusyPerSec/rl.BusyPerSec, 1)
				}
				if k, ok := byHash[hashOf{rl.Topic, rl.Partition, h.Hash}]; ok {
					hk.Key = &k
				}
				rr := reportedRange{r.Member, rl.Topic, rl.Partition, rl.Lo, rl.Hi}
				out[rr] = append(out[rr], hk)
			}
		}
	}
	return out
}

// ago says how long before now t was, to the second; "-" for no time.
func ago(now time.Time, t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	d := now.Sub(*t).Round(time.Second)
	if d < 0 {
		// The member's clock runs ahead of this machine's.
		return "0s"
	}
	return d.String()
}

// lagLine explains a partition's lag as the sum of its parts. What holds
// the safe watermark is the group's pause when it is paused, else the
// pending records at and after it.
func lagLine(lag int64, p lagParts, pending int, safe *int64, paused bool) string {
	held := "fetched, held back by the unfinished record"
	if safe != nil {
		held += fmt.Sprintf(" at offset %d", *safe)
	}
	if pending > 0 {
		held += fmt.Sprintf(" (%d pending)", pending)
	}
	notFetched := "not yet fetched"
	if paused {
		held, notFetched = "fetched, not handled: the group is paused", "not yet fetched: the group is paused"
	}
	return fmt.Sprintf("lag %d = %d handled, recorded in etcd, not yet committed to Kafka + %d %s + %d %s",
		lag, p.Uncommitted, p.Waiting, held, p.Unfetched, notFetched)
}

// lagTrend sets each partition's LagPerSec in cur from its lag in prev, the
// status read before (under --watch): positive when the group falls
// behind. A partition without a lag in either read, or reads at the same
// instant, gets none.
func lagTrend(prev, cur *groupStatus) {
	if prev == nil {
		return
	}
	secs := cur.At.Sub(prev.At).Seconds()
	if secs <= 0 {
		return
	}
	before := map[assign.TopicPartition]int64{}
	for _, p := range prev.Partitions {
		if p.Lag != nil {
			before[assign.TopicPartition{Topic: p.Topic, Partition: p.Partition}] = *p.Lag
		}
	}
	for i := range cur.Partitions {
		p := &cur.Partitions[i]
		if b, ok := before[assign.TopicPartition{Topic: p.Topic, Partition: p.Partition}]; ok && p.Lag != nil {
			v := float64(*p.Lag-b) / secs
			p.LagPerSec = &v
		}
	}
}
