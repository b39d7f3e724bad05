package coord

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/ledger"
)

// Helpers of the load balancer's tests: layouts, a cover check and a known
// load to report. Package assign's tests have their own (unexported there).

func tpOf(topic string, p int32) assign.TopicPartition {
	return assign.TopicPartition{Topic: topic, Partition: p}
}

func sl(topic string, p int32, lo, hi uint64, owner string) assign.Slice {
	return assign.Slice{TopicPartition: tpOf(topic, p), Range: ledger.HashRange{Lo: lo, Hi: hi}, Owner: owner}
}

func mw(id string, w int) assign.MemberWeight { return assign.MemberWeight{ID: id, Weight: w} }

// checkCover reports the first way out fails to cover every partition's hash
// space exactly once with owners from members.
func checkCover(parts []assign.PartitionWeight, members []assign.MemberWeight, out []assign.Slice) error {
	isPart, isMember := make(map[assign.TopicPartition]bool), make(map[string]bool)
	for _, p := range parts {
		isPart[p.TopicPartition] = true
	}
	for _, m := range members {
		isMember[m.ID] = true
	}
	if len(isPart) == 0 || len(isMember) == 0 {
		if out != nil {
			return fmt.Errorf("no members or no partitions, got %d slices", len(out))
		}
		return nil
	}
	g := make(map[assign.TopicPartition][]assign.Slice)
	for _, s := range out {
		if !isPart[s.TopicPartition] {
			return fmt.Errorf("slice of %v, which is not a partition", s.TopicPartition)
		}
		g[s.TopicPartition] = append(g[s.TopicPartition], s)
	}
	for tp := range isPart {
		list := g[tp]
		slices.SortFunc(list, func(a, b assign.Slice) int { return cmp.Compare(a.Range.Lo, b.Range.Lo) })
		at := uint64(0)
		for _, s := range list {
			switch {
			case s.Range.Lo < at:
				return fmt.Errorf("%v: %v overlaps hashes below %d", tp, s.Range, at)
			case s.Range.Lo > at:
				return fmt.Errorf("%v: gap [%d,%d)", tp, at, s.Range.Lo)
			case s.Range.Empty():
				return fmt.Errorf("%v: empty range %v", tp, s.Range)
			}
			if !isMember[s.Owner] {
				return fmt.Errorf("%v: %v owned by %q, not a member", tp, s.Range, s.Owner)
			}
			at = s.Range.Hi
		}
		if at != ledger.HashSpace {
			return fmt.Errorf("%v: covered up to %d, want %d", tp, at, ledger.HashSpace)
		}
	}
	return nil
}

// skew is a known load: busy/s of each 64th of each partition's hash space.
type skew struct {
	parts map[assign.TopicPartition][64]float64
}

const skewParts = 64

// busy is the true load of [lo, hi) of tp.
func (s skew) busy(tp assign.TopicPartition, lo, hi uint64) float64 {
	w := ledger.HashSpace / skewParts
	var sum float64
	for i, b := range s.parts[tp] {
		plo, phi := uint64(i)*w, uint64(i+1)*w
		if a, z := max(lo, plo), min(hi, phi); a < z {
			sum += b * float64(z-a) / float64(w)
		}
	}
	return sum
}

// reportsOf is what the owners of layout would report: each range's busy
// time, over LoadBuckets buckets.
func (s skew) reportsOf(layout []assign.Slice) map[assign.RangeKey]assign.RangeLoad {
	out := make(map[assign.RangeKey]assign.RangeLoad)
	for _, sl := range layout {
		lo, hi := sl.Range.Lo, sl.Range.Hi
		rl := assign.RangeLoad{Topic: sl.Topic, Partition: sl.Partition, Lo: lo, Hi: hi, BusyPerSec: s.busy(sl.TopicPartition, lo, hi)}
		if n := uint64(assign.LoadBuckets); hi-lo >= n {
			w := (hi - lo) / n
			for i := range n {
				blo, bhi := lo+i*w, lo+(i+1)*w
				if i == n-1 {
					bhi = hi
				}
				rl.Buckets = append(rl.Buckets, s.busy(sl.TopicPartition, blo, bhi))
			}
		}
		rl.RecordsPerSec = rl.BusyPerSec * 100
		out[assign.RangeKey{TP: sl.TopicPartition, Lo: lo, Hi: hi}] = rl
	}
	return out
}

// front puts share of a partition's load on its first 64th-parts (n of
// them), the rest evenly on the others.
func front(n int, share, load float64) [64]float64 {
	var d [64]float64
	for i := range d {
		if i < n {
			d[i] = load * share / float64(n)
		} else {
			d[i] = load * (1 - share) / float64(skewParts-n)
		}
	}
	return d
}
