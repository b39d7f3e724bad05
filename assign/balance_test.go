package assign

import (
	"math"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/keyshare/keyshare/ledger"
)

// skew is the true load of a group in these tests: per partition, a density
// that is constant over each of 64 equal parts of the hash space, and hot
// keys. The tests write members' reports from it (reportsOf), the way
// members measure, and judge a layout by it (trueLoads), not by the model
// BalanceByLoad builds from the reports.
type skew struct {
	parts map[TopicPartition][64]float64 // busy/s of each 64th of the hash space
	hot   map[TopicPartition][]HotKey
}

const skewParts = 64

// busy is the true load of [lo, hi) of tp.
func (s skew) busy(tp TopicPartition, lo, hi uint64) float64 {
	w := ledger.HashSpace / skewParts
	var sum float64
	for i, b := range s.parts[tp] {
		plo, phi := uint64(i)*w, uint64(i+1)*w
		if a, z := max(lo, plo), min(hi, phi); a < z {
			sum += b * float64(z-a) / float64(w)
		}
	}
	for _, h := range s.hot[tp] {
		if h.Hash >= lo && h.Hash < hi {
			sum += h.BusyPerSec
		}
	}
	return sum
}

// reportsOf is what the owners of layout would report: each range's busy
// time, over LoadBuckets buckets, with its hot keys.
func (s skew) reportsOf(layout []Slice) map[RangeKey]RangeLoad {
	out := make(map[RangeKey]RangeLoad)
	for _, sl := range layout {
		lo, hi := sl.Range.Lo, sl.Range.Hi
		rl := RangeLoad{Topic: sl.Topic, Partition: sl.Partition, Lo: lo, Hi: hi, BusyPerSec: s.busy(sl.TopicPartition, lo, hi)}
		if n := uint64(LoadBuckets); hi-lo >= n {
			w := (hi - lo) / n
			for i := range n {
				blo, bhi := lo+i*w, lo+(i+1)*w
				if i == n-1 {
					bhi = hi
				}
				rl.Buckets = append(rl.Buckets, s.busy(sl.TopicPartition, blo, bhi))
			}
		}
		for _, h := range s.hot[sl.TopicPartition] {
			if h.Hash >= lo && h.Hash < hi && len(rl.Hot) < MaxHotKeys {
				rl.Hot = append(rl.Hot, h)
			}
		}
		rl.RecordsPerSec = rl.BusyPerSec * 100
		out[RangeKey{sl.TopicPartition, lo, hi}] = rl
	}
	return out
}

// trueLoads is each member's true load under layout.
func (s skew) trueLoads(layout []Slice) map[string]float64 {
	out := make(map[string]float64)
	for _, sl := range layout {
		out[sl.Owner] += s.busy(sl.TopicPartition, sl.Range.Lo, sl.Range.Hi)
	}
	return out
}

func (s skew) total() float64 {
	var sum float64
	for tp := range s.parts {
		sum += s.busy(tp, 0, ledger.HashSpace)
	}
	return sum
}

func maxOf(m map[string]float64) float64 {
	var x float64
	for _, v := range m {
		x = max(x, v)
	}
	return x
}

// rangesPer counts the ranges of each partition, adjacent ranges of one
// owner counting once (the leader merges them).
func rangesPer(layout []Slice) map[TopicPartition]int {
	by := byPartition(layout)
	out := make(map[TopicPartition]int)
	for tp, s := range by {
		slices.SortFunc(s, func(a, b Slice) int { return int(a.Range.Lo>>1) - int(b.Range.Lo>>1) })
		for i, x := range s {
			if i == 0 || s[i-1].Owner != x.Owner || s[i-1].Range.Hi != x.Range.Lo {
				out[tp]++
			}
		}
	}
	return out
}

func owners(layout []Slice) map[TopicPartition]map[string]bool {
	out := make(map[TopicPartition]map[string]bool)
	for _, s := range layout {
		if out[s.TopicPartition] == nil {
			out[s.TopicPartition] = make(map[string]bool)
		}
		out[s.TopicPartition][s.Owner] = true
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

func TestBalanceByLoadSkewedPartition(t *testing.T) {
	t.Parallel()
	tp := tpOf("t", 0)
	parts := []PartitionWeight{{TopicPartition: tp}}
	members := []MemberWeight{mw("a", 1), mw("b", 1), mw("c", 1), mw("d", 1)}
	// 80 % of the load in the first eighth of the hash space.
	truth := skew{parts: map[TopicPartition][64]float64{tp: front(8, 0.8, 4)}}
	layout := Assign(parts, members, nil) // by width
	before := maxOf(truth.trueLoads(layout))
	ideal := truth.total() / float64(len(members))
	if before < 3*ideal {
		t.Fatalf("width layout's busiest member %.2f: want the skew to show (ideal %.2f)", before, ideal)
	}
	p := BalanceByLoad(parts, members, layout, truth.reportsOf(layout), 1.25)
	if !p.Move {
		t.Fatalf("no move on 80 %% of the load in an eighth: %s", p.Why)
	}
	if err := checkCover(parts, members, p.Want); err != nil {
		t.Fatal(err)
	}
	checkContiguous(t, p.Want)
	after := maxOf(truth.trueLoads(p.Want))
	// The first eighth is seen at the resolution of the width layout's
	// buckets (a 64th of the space each): within 15 % of the ideal.
	if after > 1.15*ideal {
		t.Fatalf("busiest member after %.3f, ideal %.3f, before %.3f: want within 15 %%\n%v", after, ideal, before, p.Want)
	}
	if math.Abs(p.Before-before) > 0.03*before || p.After > 1.15*ideal {
		t.Fatalf("predicted busiest %.3f → %.3f; true %.3f → %.3f", p.Before, p.After, before, after)
	}
	if p.Moved <= 0 || p.Moved >= 1 {
		t.Fatalf("moved share %v: want in (0, 1)", p.Moved)
	}
	// Reports of the new layout describe the same load: no move again
	// (no thrash), every time.
	for range 3 {
		again := BalanceByLoad(parts, members, p.Want, truth.reportsOf(p.Want), 1.25)
		if again.Move {
			t.Fatalf("moved again on reports of the balanced layout: %.3f → %.3f, moving %.3f", again.Before, again.After, again.Moved)
		}
	}
	if n := rangesPer(p.Want)[tp]; n > len(owners(p.Want)[tp])+1 {
		t.Fatalf("%d ranges for %d owners", n, len(owners(p.Want)[tp]))
	}
}

func TestBalanceByLoadHotKey(t *testing.T) {
	t.Parallel()
	tp := tpOf("t", 0)
	parts := []PartitionWeight{{TopicPartition: tp}}
	members := []MemberWeight{mw("a", 1), mw("b", 1), mw("c", 1), mw("d", 1)}
	// One key carries 40 % of the load: more than a member's 25 %.
	const h = 3_000_000_000
	var even [64]float64
	for i := range even {
		even[i] = 6.0 / skewParts
	}
	truth := skew{parts: map[TopicPartition][64]float64{tp: even}, hot: map[TopicPartition][]HotKey{tp: {{Hash: h, BusyPerSec: 4}}}}
	layout := Assign(parts, members, nil)
	p := BalanceByLoad(parts, members, layout, truth.reportsOf(layout), 1.25)
	if !p.Move {
		t.Fatalf("no move: %s (%.2f → %.2f)\n%v", p.Why, p.Before, p.After, p.Want)
	}
	if err := checkCover(parts, members, p.Want); err != nil {
		t.Fatal(err)
	}
	hotOwner := ownerAt(p.Want, h)
	for _, s := range p.Want {
		if s.Owner == hotOwner && s.Range != (ledger.HashRange{Lo: h, Hi: h + 1}) {
			t.Fatalf("the hot key's owner %s also owns %v: want [h, h+1) alone\n%v", hotOwner, s.Range, p.Want)
		}
	}
	// Its neighbours share the rest: each within 15 % of 6/3.
	loads := truth.trueLoads(p.Want)
	for id, v := range loads {
		if id != hotOwner && math.Abs(v-2) > 0.3 {
			t.Fatalf("member %s carries %.2f beside the hot key: want about 2 (loads %v)", id, v, loads)
		}
	}
	if again := BalanceByLoad(parts, members, p.Want, truth.reportsOf(p.Want), 1.25); again.Move {
		t.Fatalf("moved again: %.3f → %.3f", again.Before, again.After)
	}
}

// TestBalanceByLoadWholePartitions: with as many members as partitions,
// whole partitions stay whole unless one partition carries clearly more
// than a member's share.
func TestBalanceByLoadWholePartitions(t *testing.T) {
	t.Parallel()
	var parts []PartitionWeight
	for i := range int32(4) {
		parts = append(parts, PartitionWeight{TopicPartition: tpOf("t", i)})
	}
	members := []MemberWeight{mw("a", 1), mw("b", 1), mw("c", 1), mw("d", 1)}
	uniform := func(load float64) [64]float64 { return front(1, 1.0/skewParts, load) }

	t.Run("one partition with 55%", func(t *testing.T) {
		truth := skew{parts: map[TopicPartition][64]float64{
			tpOf("t", 0): uniform(15), tpOf("t", 1): uniform(55), tpOf("t", 2): uniform(15), tpOf("t", 3): uniform(15),
		}}
		layout := Assign(parts, members, nil)
		p := BalanceByLoad(parts, members, layout, truth.reportsOf(layout), 1.25)
		if !p.Move {
			t.Fatalf("no move: %s", p.Why)
		}
		if err := checkCover(parts, members, p.Want); err != nil {
			t.Fatal(err)
		}
		if after := maxOf(truth.trueLoads(p.Want)); after > 27 {
			t.Fatalf("busiest member %.2f after: want about 25 (%v)", after, p.Want)
		}
		if len(owners(p.Want)[tpOf("t", 1)]) < 2 {
			t.Fatalf("the heavy partition is not split: %v", p.Want)
		}
	})
	t.Run("spread enough for whole partitions", func(t *testing.T) {
		two := members[:2]
		truth := skew{parts: map[TopicPartition][64]float64{
			tpOf("t", 0): uniform(30), tpOf("t", 1): uniform(30), tpOf("t", 2): uniform(20), tpOf("t", 3): uniform(20),
		}}
		// Width puts t/0 and t/1 with a: 60 against 40.
		layout := []Slice{sl("t", 0, 0, ledger.HashSpace, "a"), sl("t", 1, 0, ledger.HashSpace, "a"), sl("t", 2, 0, ledger.HashSpace, "b"), sl("t", 3, 0, ledger.HashSpace, "b")}
		p := BalanceByLoad(parts, two, layout, truth.reportsOf(layout), 1.15)
		if !p.Move {
			t.Fatalf("no move: %s (%.2f → %.2f)", p.Why, p.Before, p.After)
		}
		if !isWhole(p.Want) {
			t.Fatalf("split partitions where whole ones balance: %v", p.Want)
		}
		if after := maxOf(truth.trueLoads(p.Want)); after != 50 {
			t.Fatalf("busiest member %.2f: want 50", after)
		}
	})
}

func TestBalanceByLoadNoMove(t *testing.T) {
	t.Parallel()
	tp := tpOf("t", 0)
	parts := []PartitionWeight{{TopicPartition: tp}, {TopicPartition: tpOf("t", 1)}}
	members := []MemberWeight{mw("a", 1), mw("b", 1), mw("c", 1)}
	layout := Assign(parts, members, nil)
	flat := func(load float64) [64]float64 { return front(1, 1.0/skewParts, load) }
	truth := skew{parts: map[TopicPartition][64]float64{tp: flat(3), tpOf("t", 1): flat(3)}}
	if p := BalanceByLoad(parts, members, layout, truth.reportsOf(layout), 1.25); p.Move {
		t.Fatalf("moved on uniform load: %.3f → %.3f", p.Before, p.After)
	}
	// A 20 % imbalance is below a 1.25 minimum gain, and above 1.1.
	truth = skew{parts: map[TopicPartition][64]float64{tp: flat(3.6), tpOf("t", 1): flat(2.4)}}
	if p := BalanceByLoad(parts, members, layout, truth.reportsOf(layout), 1.25); p.Move {
		t.Fatalf("moved for a gain of %.3f, below 1.25", p.Before/p.After)
	}
	if p := BalanceByLoad(parts, members, layout, truth.reportsOf(layout), 1.1); !p.Move {
		t.Fatalf("no move for a gain of %.3f, above 1.1: %s", p.Before/p.After, p.Why)
	}
	// No reports, or reports of no work: nothing to balance.
	if p := BalanceByLoad(parts, members, layout, nil, 1.25); p.Move || p.Want != nil {
		t.Fatalf("moved without reports: %+v", p)
	}
	idle := skew{parts: map[TopicPartition][64]float64{tp: {}, tpOf("t", 1): {}}}
	if p := BalanceByLoad(parts, members, layout, idle.reportsOf(layout), 1.25); p.Move {
		t.Fatalf("moved on idle reports: %+v", p)
	}
	// Reports for ranges that are not the current ones count for nothing.
	stale := truth.reportsOf([]Slice{sl("t", 0, 0, 1<<20, "a")})
	if p := BalanceByLoad(parts, members, layout, stale, 1.1); p.Move {
		t.Fatalf("moved on reports of other ranges: %+v", p)
	}
	// A range owned by a member that is not eligible: no move.
	gone := slices.Clone(layout)
	gone[0].Owner = "zz"
	if p := BalanceByLoad(parts, members, gone, truth.reportsOf(gone), 1.1); p.Move {
		t.Fatalf("moved with an owner that is not a member: %+v", p)
	}
}

// drawSkew draws a load over parts: a density in 64 parts of each, and in
// one partition of four a hot key of up to maxHot.
func drawSkew(t *rapid.T, parts []PartitionWeight, maxHot float64) skew {
	truth := skew{parts: map[TopicPartition][64]float64{}, hot: map[TopicPartition][]HotKey{}}
	for _, p := range parts {
		var d [64]float64
		for i := range d {
			d[i] = rapid.Float64Range(0, 10).Draw(t, "density")
		}
		truth.parts[p.TopicPartition] = d
		if rapid.IntRange(0, 3).Draw(t, "hot?") == 0 {
			truth.hot[p.TopicPartition] = []HotKey{{Hash: rapid.Uint64Range(0, ledger.HashSpace-1).Draw(t, "hash"), BusyPerSec: rapid.Float64Range(0, maxHot).Draw(t, "hot load")}}
		}
	}
	return truth
}

// TestBalanceByLoadProperties: on random skews, layouts and weights, the
// answer covers every partition exactly with members only, keeps each
// member one span of the line, is the same for inputs in any order, and
// never predicts a busier member than now when it moves.
func TestBalanceByLoadProperties(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		weighted := rapid.Bool().Draw(t, "weighted")
		parts := genParts(false, 6).Draw(t, "parts")
		members := genMembers(weighted, 1, 10).Draw(t, "members")
		parts, members = sortedUnique(parts, members)
		truth := drawSkew(t, parts, 200)
		layout := Assign(parts, members, nil)
		reports := truth.reportsOf(layout)
		// Some ranges go unreported.
		for _, s := range layout {
			if rapid.IntRange(0, 4).Draw(t, "drop") == 0 {
				delete(reports, RangeKey{s.TopicPartition, s.Range.Lo, s.Range.Hi})
			}
		}
		p := BalanceByLoad(parts, members, layout, reports, 1.25)
		if p.Want == nil {
			return
		}
		if err := checkCover(parts, members, p.Want); err != nil {
			t.Fatal(err)
		}
		if len(members) > len(parts) || !isWhole(p.Want) {
			checkContiguous(t, p.Want)
		}
		if p.Move && p.After*1.25 > p.Before*(1+1e-9) {
			t.Fatalf("moved for %.3f → %.3f", p.Before, p.After)
		}
		for tp, n := range rangesPer(p.Want) {
			if n > len(owners(p.Want)[tp])+1 {
				t.Fatalf("%v: %d ranges for %d owners", tp, n, len(owners(p.Want)[tp]))
			}
		}
		// Any order of the inputs: the same answer.
		shuffled := slices.Clone(layout)
		slices.Reverse(shuffled)
		m2 := slices.Clone(members)
		slices.Reverse(m2)
		p2 := BalanceByLoad(parts, m2, shuffled, reports, 1.25)
		if !slices.Equal(p.Want, p2.Want) || p.Move != p2.Move {
			t.Fatalf("answer depends on input order")
		}
	})
}

// TestBalanceByLoadOtherPartitions: ranges of partitions outside the
// assignment (a topic whose count could not be read) count for nothing.
func TestBalanceByLoadOtherPartitions(t *testing.T) {
	t.Parallel()
	tp := tpOf("t", 0)
	parts := []PartitionWeight{{TopicPartition: tp}}
	members := []MemberWeight{mw("a", 1), mw("b", 1)}
	truth := skew{parts: map[TopicPartition][64]float64{tp: front(8, 0.8, 10), tpOf("u", 0): front(8, 0.8, 1000)}}
	layout := Assign(parts, members, nil)
	p := BalanceByLoad(parts, members, layout, truth.reportsOf(layout), 1.25)
	extra := append(slices.Clone(layout), sl("u", 0, 0, ledger.HashSpace, "a"))
	q := BalanceByLoad(parts, members, extra, truth.reportsOf(extra), 1.25)
	if p.Before != q.Before || p.After != q.After || !slices.Equal(p.Want, q.Want) {
		t.Fatalf("another partition's range changed the answer: %.3f → %.3f against %.3f → %.3f", q.Before, q.After, p.Before, p.After)
	}
}
