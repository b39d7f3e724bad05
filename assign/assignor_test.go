package assign

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/keyshare/keyshare/ledger"
)

// The helpers below look at an assignment from outside: apart from weightOf
// (weights of 0 or less mean 1) they know nothing of the line, spans or
// quotas inside assignor.go, only partitions, weights and hash ranges.

func tpOf(topic string, p int32) TopicPartition { return TopicPartition{Topic: topic, Partition: p} }

// uniqueParts is the weight of each partition in parts. Tests repeat a
// partition only with the same weight.
func uniqueParts(parts []PartitionWeight) map[TopicPartition]uint64 {
	out := make(map[TopicPartition]uint64, len(parts))
	for _, p := range parts {
		if _, ok := out[p.TopicPartition]; !ok {
			out[p.TopicPartition] = weightOf(p.Weight)
		}
	}
	return out
}

// uniqueMembers is the weight of each member in members.
func uniqueMembers(members []MemberWeight) map[string]uint64 {
	out := make(map[string]uint64, len(members))
	for _, m := range members {
		if _, ok := out[m.ID]; !ok {
			out[m.ID] = memberWeight(m.Weight)
		}
	}
	return out
}

// byPartition groups slices by partition, each list sorted by Lo.
func byPartition(out []Slice) map[TopicPartition][]Slice {
	g := make(map[TopicPartition][]Slice)
	for _, s := range out {
		g[s.TopicPartition] = append(g[s.TopicPartition], s)
	}
	for _, list := range g {
		slices.SortFunc(list, func(a, b Slice) int { return cmp.Compare(a.Range.Lo, b.Range.Lo) })
	}
	return g
}

// checkCover reports the first way out fails to cover every partition's hash
// space exactly once with owners from members.
func checkCover(parts []PartitionWeight, members []MemberWeight, out []Slice) error {
	pw, mw := uniqueParts(parts), uniqueMembers(members)
	if len(mw) == 0 || len(pw) == 0 {
		if out != nil {
			return fmt.Errorf("no members or no partitions, got %d slices", len(out))
		}
		return nil
	}
	g := byPartition(out)
	for tp := range g {
		if _, ok := pw[tp]; !ok {
			return fmt.Errorf("slice of %v, which is not a partition", tp)
		}
	}
	for tp := range pw {
		at := uint64(0)
		for _, s := range g[tp] {
			switch {
			case s.Range.Lo < at:
				return fmt.Errorf("%v: %v overlaps hashes below %d", tp, s.Range, at)
			case s.Range.Lo > at:
				return fmt.Errorf("%v: gap [%d,%d)", tp, at, s.Range.Lo)
			case s.Range.Empty():
				return fmt.Errorf("%v: empty range %v", tp, s.Range)
			}
			if _, ok := mw[s.Owner]; !ok {
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

// shares is each owner's weighted share: the sum of Range.Len() × the
// partition's weight over its slices of current partitions.
func shares(parts []PartitionWeight, s []Slice) map[string]uint64 {
	pw := uniqueParts(parts)
	out := make(map[string]uint64)
	for _, x := range s {
		if w, ok := pw[x.TopicPartition]; ok {
			out[x.Owner] += x.Range.Intersect(ledger.Full).Len() * w
		}
	}
	return out
}

// wholeCounts is how many partitions each owner has.
func wholeCounts(s []Slice) map[string]uint64 {
	out := make(map[string]uint64)
	for _, x := range s {
		out[x.Owner]++
	}
	return out
}

// reads is the number of distinct (member, partition) pairs: how many
// partition fetches the group makes in total.
func reads(s []Slice) int {
	type pair struct {
		tp    TopicPartition
		owner string
	}
	seen := make(map[pair]bool)
	for _, x := range s {
		seen[pair{x.TopicPartition, x.Owner}] = true
	}
	return len(seen)
}

// ownerAt returns the owner of hash h in list (sorted by Lo, no overlap), or
// "" if nobody owns it.
func ownerAt(list []Slice, h uint64) string {
	i, _ := slices.BinarySearchFunc(list, h, func(s Slice, h uint64) int {
		if s.Range.Hi <= h {
			return -1
		}
		if s.Range.Lo > h {
			return 1
		}
		return 0
	})
	if i < len(list) && list[i].Range.Lo <= h && h < list[i].Range.Hi {
		return list[i].Owner
	}
	return ""
}

// moved is the weighted hash space of current partitions whose owner in out
// differs from its owner in prev (prev must not overlap itself); space nobody
// owned before counts as moved.
func moved(parts []PartitionWeight, prev, out []Slice) uint64 {
	pw := uniqueParts(parts)
	pg, og := byPartition(prev), byPartition(out)
	var n uint64
	for tp, w := range pw {
		cuts := []uint64{0, ledger.HashSpace}
		for _, s := range pg[tp] {
			r := s.Range.Intersect(ledger.Full)
			cuts = append(cuts, r.Lo, r.Hi)
		}
		for _, s := range og[tp] {
			cuts = append(cuts, s.Range.Lo, s.Range.Hi)
		}
		slices.Sort(cuts)
		cuts = slices.Compact(cuts)
		for i := 0; i+1 < len(cuts); i++ {
			lo, hi := cuts[i], cuts[i+1]
			if a, b := ownerAt(pg[tp], lo), ownerAt(og[tp], lo); a == "" || a != b {
				n += (hi - lo) * w
			}
		}
	}
	return n
}

// lowerBound is the least weighted hash space any assignment with the new
// shares must move: every member that ends with more than it held before
// gains at least the difference.
func lowerBound(parts []PartitionWeight, prev, out []Slice) uint64 {
	before, after := shares(parts, prev), shares(parts, out)
	var n uint64
	for id, a := range after {
		if b := before[id]; a > b {
			n += a - b
		}
	}
	return n
}

// ideal returns floor and ceiling of total × w / sum.
func ideal(total, w, sum uint64) (lo, hi uint64) {
	h, l := bits.Mul64(total, w)
	q, r := bits.Div64(h, l, sum)
	if r == 0 {
		return q, q
	}
	return q, q + 1
}

// isWhole reports whether every slice is a whole partition.
func isWhole(s []Slice) bool {
	for _, x := range s {
		if x.Range != ledger.Full {
			return false
		}
	}
	return true
}

// lineTotal is the length of the line: the sum of the partitions' weights
// times the hash space.
func lineTotal(parts []PartitionWeight) uint64 {
	var n uint64
	for _, w := range uniqueParts(parts) {
		n += w * ledger.HashSpace
	}
	return n
}

// distance is how far x lies outside [lo, hi].
func distance(x, lo, hi uint64) uint64 {
	switch {
	case x < lo:
		return lo - x
	case x > hi:
		return x - hi
	}
	return 0
}

// checkShares checks that every member's share is within one unit of its
// weighted ideal. In whole mode the unit is a partition (partition weights
// play no part there); in line mode it is a hash, and with partitions heavier
// than 1 the cuts are rounded to whole hashes: a fresh cut stays within one
// hash of the heaviest partition, a sticky one within one such hash per
// member (each member's quota runs out at one point of the line that need
// not fall on a hash, and a member's share can start at several of them).
func checkShares(parts []PartitionWeight, members []MemberWeight, fresh bool, out []Slice) error {
	pw, mw := uniqueParts(parts), uniqueMembers(members)
	var wsum uint64
	for _, w := range mw {
		wsum += w
	}
	if len(mw) <= len(pw) {
		counts := wholeCounts(out)
		for id, w := range mw {
			lo, hi := ideal(uint64(len(pw)), w, wsum)
			if got := counts[id]; got < lo || got > hi {
				return fmt.Errorf("member %s (weight %d of %d) has %d whole partitions, want %d..%d", id, w, wsum, got, lo, hi)
			}
		}
		return nil
	}
	wmax := uint64(1)
	for _, w := range pw {
		wmax = max(wmax, w)
	}
	slack := uint64(1) // distance must stay below this
	switch {
	case wmax == 1:
	case fresh:
		slack = wmax
	default:
		slack = wmax * uint64(len(mw))
	}
	sh := shares(parts, out)
	total := lineTotal(parts)
	for id, w := range mw {
		lo, hi := ideal(total, w, wsum)
		if d := distance(sh[id], lo, hi); d >= slack {
			return fmt.Errorf("member %s (weight %d of %d) has %d of %d, ideal %d..%d: off by %d, limit %d (heaviest partition %d, fresh %v)",
				id, w, wsum, sh[id], total, lo, hi, d, slack-1, wmax, fresh)
		}
	}
	return nil
}

func sl(topic string, p int32, lo, hi uint64, owner string) Slice {
	return Slice{TopicPartition: tpOf(topic, p), Range: ledger.HashRange{Lo: lo, Hi: hi}, Owner: owner}
}

func pw(topic string, p int32, w int) PartitionWeight {
	return PartitionWeight{TopicPartition: tpOf(topic, p), Weight: w}
}

func mw(id string, w int) MemberWeight { return MemberWeight{ID: id, Weight: w} }

const (
	hs   = ledger.HashSpace
	half = ledger.HashSpace / 2
)

func TestAssignTable(t *testing.T) {
	t.Parallel()
	full := func(topic string, p int32, owner string) Slice { return sl(topic, p, 0, hs, owner) }
	tests := []struct {
		name    string
		parts   []PartitionWeight
		members []MemberWeight
		prev    []Slice
		want    []Slice
	}{
		{
			name:  "no members",
			parts: []PartitionWeight{pw("t", 0, 1)},
		},
		{
			name:    "no partitions",
			members: []MemberWeight{mw("a", 1)},
		},
		{
			name:    "one member takes every partition whole",
			parts:   []PartitionWeight{pw("t", 2, 1), pw("t", 0, 1), pw("t", 1, 1)},
			members: []MemberWeight{mw("a", 1)},
			want:    []Slice{full("t", 0, "a"), full("t", 1, "a"), full("t", 2, "a")},
		},
		{
			name:    "two members three partitions: the tie goes to the first id",
			parts:   []PartitionWeight{pw("t", 0, 1), pw("t", 1, 1), pw("t", 2, 1)},
			members: []MemberWeight{mw("b", 1), mw("a", 1)},
			want:    []Slice{full("t", 0, "a"), full("t", 1, "a"), full("t", 2, "b")},
		},
		{
			name:    "member weights count in whole mode",
			parts:   []PartitionWeight{pw("t", 0, 1), pw("t", 1, 1), pw("t", 2, 1)},
			members: []MemberWeight{mw("a", 1), mw("b", 2)},
			want:    []Slice{full("t", 0, "a"), full("t", 1, "b"), full("t", 2, "b")},
		},
		{
			name:    "partition weights do not count in whole mode",
			parts:   []PartitionWeight{pw("t", 0, 5), pw("t", 1, 1), pw("t", 2, 1)},
			members: []MemberWeight{mw("a", 1), mw("b", 1)},
			want:    []Slice{full("t", 0, "a"), full("t", 1, "a"), full("t", 2, "b")},
		},
		{
			name:    "one partition two members",
			parts:   []PartitionWeight{pw("t", 0, 1)},
			members: []MemberWeight{mw("a", 1), mw("b", 1)},
			want:    []Slice{sl("t", 0, 0, half, "a"), sl("t", 0, half, hs, "b")},
		},
		{
			name:    "weights zero and negative count as one",
			parts:   []PartitionWeight{pw("t", 0, 0)},
			members: []MemberWeight{mw("a", 0), mw("b", -3), mw("c", 1)},
			// 2^32 = 3 × 1431655765 + 1: the extra hash goes to a.
			want: []Slice{sl("t", 0, 0, 1431655766, "a"), sl("t", 0, 1431655766, 2863311531, "b"), sl("t", 0, 2863311531, hs, "c")},
		},
		{
			name:    "two partitions three members: the line is cut in thirds",
			parts:   []PartitionWeight{pw("t", 0, 1), pw("t", 1, 1)},
			members: []MemberWeight{mw("a", 1), mw("b", 1), mw("c", 1)},
			// 2 × 2^32 = 3 × 2863311530 + 2: a and b get one more hash.
			want: []Slice{
				sl("t", 0, 0, 2863311531, "a"),
				sl("t", 0, 2863311531, hs, "b"), sl("t", 1, 0, 1431655766, "b"),
				sl("t", 1, 1431655766, hs, "c"),
			},
		},
		{
			name:    "a heavy partition takes more of the line",
			parts:   []PartitionWeight{pw("t", 0, 2), pw("t", 1, 1)},
			members: []MemberWeight{mw("a", 1), mw("b", 1), mw("c", 1)},
			want:    []Slice{sl("t", 0, 0, half, "a"), sl("t", 0, half, hs, "b"), full("t", 1, "c")},
		},
		{
			name:    "topics sort by name, then partition",
			parts:   []PartitionWeight{pw("b", 0, 1), pw("a", 1, 1), pw("a", 0, 1)},
			members: []MemberWeight{mw("x", 1), mw("y", 1), mw("z", 1)},
			want:    []Slice{full("a", 0, "x"), full("a", 1, "y"), full("b", 0, "z")},
		},
		{
			name:    "duplicate partitions and members count once",
			parts:   []PartitionWeight{pw("t", 1, 1), pw("t", 0, 1), pw("t", 0, 1)},
			members: []MemberWeight{mw("a", 1), mw("b", 1), mw("a", 1)},
			want:    []Slice{full("t", 0, "a"), full("t", 1, "b")},
		},
		{
			name:    "sticky whole: members keep their partitions",
			parts:   []PartitionWeight{pw("t", 0, 1), pw("t", 1, 1), pw("t", 2, 1)},
			members: []MemberWeight{mw("a", 1), mw("b", 1), mw("c", 1)},
			prev:    []Slice{full("t", 0, "c"), full("t", 1, "a"), full("t", 2, "b")},
			want:    []Slice{full("t", 0, "c"), full("t", 1, "a"), full("t", 2, "b")},
		},
		{
			name:    "sticky whole: a leaver's partition goes to the member below its quota",
			parts:   []PartitionWeight{pw("t", 0, 1), pw("t", 1, 1), pw("t", 2, 1)},
			members: []MemberWeight{mw("b", 1), mw("c", 1)},
			prev:    []Slice{full("t", 0, "c"), full("t", 1, "a"), full("t", 2, "b")},
			want:    []Slice{full("t", 0, "c"), full("t", 1, "b"), full("t", 2, "b")},
		},
		{
			name:    "sticky join: each member keeps the front of its partition",
			parts:   []PartitionWeight{pw("t", 0, 1), pw("t", 1, 1)},
			members: []MemberWeight{mw("a", 1), mw("b", 1), mw("c", 1)},
			prev:    []Slice{full("t", 0, "a"), full("t", 1, "b")},
			want: []Slice{
				sl("t", 0, 0, 2863311531, "a"), sl("t", 0, 2863311531, hs, "c"),
				sl("t", 1, 0, 2863311531, "b"), sl("t", 1, 2863311531, hs, "c"),
			},
		},
		{
			name:    "sticky leave back to whole: each partition goes to its biggest holder",
			parts:   []PartitionWeight{pw("t", 0, 1), pw("t", 1, 1)},
			members: []MemberWeight{mw("a", 1), mw("c", 1)},
			prev: []Slice{
				sl("t", 0, 0, 2863311531, "a"), sl("t", 0, 2863311531, hs, "c"),
				sl("t", 1, 0, 2863311531, "b"), sl("t", 1, 2863311531, hs, "c"),
			},
			want: []Slice{full("t", 0, "a"), full("t", 1, "c")},
		},
		{
			name:    "prev of gone partitions and of non-members is ignored",
			parts:   []PartitionWeight{pw("t", 0, 1)},
			members: []MemberWeight{mw("a", 1), mw("b", 1)},
			prev:    []Slice{full("t", 9, "a"), sl("t", 0, 0, half, "ghost"), sl("t", 0, half, hs, "b")},
			want:    []Slice{sl("t", 0, 0, half, "a"), sl("t", 0, half, hs, "b")},
		},
		{
			name:    "prev range beyond the hash space keeps only its valid part",
			parts:   []PartitionWeight{pw("t", 0, 1)},
			members: []MemberWeight{mw("a", 1), mw("b", 1)},
			prev:    []Slice{sl("t", 0, hs-10, 2*hs, "a")},
			want:    []Slice{sl("t", 0, 0, half-10, "a"), sl("t", 0, half-10, hs-10, "b"), sl("t", 0, hs-10, hs, "a")},
		},
		{
			name:    "prev range with lo above hi is ignored",
			parts:   []PartitionWeight{pw("t", 0, 1)},
			members: []MemberWeight{mw("a", 1), mw("b", 1)},
			prev:    []Slice{sl("t", 0, 100, 10, "b")},
			want:    []Slice{sl("t", 0, 0, half, "a"), sl("t", 0, half, hs, "b")},
		},
		{
			name:    "overlapping prev: a hash held twice stays with the slice that starts first",
			parts:   []PartitionWeight{pw("t", 0, 1)},
			members: []MemberWeight{mw("a", 1), mw("b", 1)},
			prev:    []Slice{sl("t", 0, 0, 3*hs/4, "b"), sl("t", 0, hs/4, hs, "a")},
			want:    []Slice{sl("t", 0, 0, half, "b"), sl("t", 0, half, hs, "a")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Assign(tt.parts, tt.members, tt.prev)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Assign =\n  %v\nwant\n  %v", got, tt.want)
			}
			if err := checkCover(tt.parts, tt.members, got); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Generators for the property tests. Partitions are drawn from a few topics
// and numbers, members from a pool of ids, so that prev and the new inputs
// share some of each.

var (
	genTopic    = rapid.SampledFrom([]string{"a", "b", "c"})
	genMemberID = rapid.Custom(func(t *rapid.T) string { return fmt.Sprintf("m%02d", rapid.IntRange(0, 15).Draw(t, "id")) })
)

// genParts draws distinct partitions; with weighted, weights from -1 to 4
// (-1 and 0 mean 1).
func genParts(weighted bool, maxN int) *rapid.Generator[[]PartitionWeight] {
	return rapid.SliceOfNDistinct(rapid.Custom(func(t *rapid.T) PartitionWeight {
		w := 1
		if weighted {
			w = rapid.IntRange(-1, 4).Draw(t, "weight")
		}
		return PartitionWeight{TopicPartition: tpOf(genTopic.Draw(t, "topic"), rapid.Int32Range(0, 4).Draw(t, "partition")), Weight: w}
	}), 1, maxN, func(p PartitionWeight) TopicPartition { return p.TopicPartition })
}

// genMembers draws distinct members; with weighted, weights from -1 to 4.
func genMembers(weighted bool, minN, maxN int) *rapid.Generator[[]MemberWeight] {
	return rapid.SliceOfNDistinct(rapid.Custom(func(t *rapid.T) MemberWeight {
		w := 1
		if weighted {
			w = rapid.IntRange(-1, 4).Draw(t, "weight")
		}
		return MemberWeight{ID: genMemberID.Draw(t, "id"), Weight: w}
	}), minN, maxN, func(m MemberWeight) string { return m.ID })
}

// genHash draws a hash bound, favouring the edges of the hash space and
// including values outside it.
var genHash = rapid.OneOf(
	rapid.SampledFrom([]uint64{0, 1, half - 1, half, half + 1, hs - 1, hs, hs + 1, 2 * hs}),
	rapid.Uint64Range(0, hs),
)

// genBadPrev draws a damaged prev: slices of any partition (also gone
// ones), any owner (also non-members), overlapping, empty, reversed or
// outside the hash space.
var genBadPrev = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Slice {
	owner := genMemberID.Draw(t, "owner")
	if rapid.IntRange(0, 9).Draw(t, "ghost") == 0 {
		owner = "ghost"
	}
	return Slice{
		TopicPartition: tpOf(genTopic.Draw(t, "topic"), rapid.Int32Range(0, 6).Draw(t, "partition")),
		Range:          ledger.HashRange{Lo: genHash.Draw(t, "lo"), Hi: genHash.Draw(t, "hi")},
		Owner:          owner,
	}
}), 0, 24)

// genValidPrev draws a prev that an earlier Assign could have written:
// zero to three rounds of Assign over other draws of partitions and members,
// so that it is fragmented the way real sticky histories are.
func genValidPrev(t *rapid.T, weighted bool) []Slice {
	var prev []Slice
	for i, n := 0, rapid.IntRange(0, 3).Draw(t, "rounds"); i < n; i++ {
		prev = Assign(genParts(weighted, 8).Draw(t, "prevParts"), genMembers(weighted, 1, 12).Draw(t, "prevMembers"), prev)
	}
	return prev
}

// checkDeterministic checks that Assign does not depend on the order of
// its inputs.
func checkDeterministic(t *rapid.T, parts []PartitionWeight, members []MemberWeight, prev, want []Slice) {
	p2 := rapid.Permutation(parts).Draw(t, "partsShuffled")
	m2 := rapid.Permutation(members).Draw(t, "membersShuffled")
	v2 := rapid.Permutation(prev).Draw(t, "prevShuffled")
	if got := Assign(p2, m2, v2); !slices.Equal(got, want) {
		t.Fatalf("inputs in another order give another assignment:\n  %v\nwant\n  %v", got, want)
	}
}

func TestAssignProperties(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		weighted := rapid.Bool().Draw(t, "weighted")
		parts := genParts(weighted, 8).Draw(t, "parts")
		members := genMembers(weighted, 1, 14).Draw(t, "members")
		var prev []Slice
		fresh := rapid.Bool().Draw(t, "fresh")
		if !fresh {
			prev = genValidPrev(t, weighted)
		}
		out := Assign(parts, members, prev)
		if err := checkCover(parts, members, out); err != nil {
			t.Fatal(err)
		}
		P, M := len(parts), len(members)
		if M <= P && !isWhole(out) {
			t.Fatalf("%d members, %d partitions: want whole partitions, got %v", M, P, out)
		}
		if fresh && M > P && reads(out) > P+M-1 {
			t.Fatalf("fresh cut of %d partitions among %d members reads %d partitions, want <= %d", P, M, reads(out), P+M-1)
		}
		if err := checkShares(parts, members, fresh, out); err != nil {
			t.Fatal(err)
		}
		checkDeterministic(t, parts, members, prev, out)
	})
}

func TestAssignMalformedPrev(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		parts := genParts(rapid.Bool().Draw(t, "weighted"), 8).Draw(t, "parts")
		members := genMembers(rapid.Bool().Draw(t, "weighted"), 1, 14).Draw(t, "members")
		prev := genBadPrev.Draw(t, "prev")
		out := Assign(parts, members, prev)
		if err := checkCover(parts, members, out); err != nil {
			t.Fatalf("%v\nprev %v\nout %v", err, prev, out)
		}
		if len(members) <= len(parts) && !isWhole(out) {
			t.Fatalf("want whole partitions, got %v", out)
		}
		checkDeterministic(t, parts, members, prev, out)
		// Repeated partitions and members (with the same weight) count once.
		dupParts := append(slices.Clone(parts), rapid.SliceOf(rapid.SampledFrom(parts)).Draw(t, "moreParts")...)
		dupMembers := append(slices.Clone(members), rapid.SliceOf(rapid.SampledFrom(members)).Draw(t, "moreMembers")...)
		if got := Assign(dupParts, dupMembers, prev); !slices.Equal(got, out) {
			t.Fatalf("repeated inputs change the assignment:\n  %v\nwant\n  %v", got, out)
		}
	})
}

// TestAssignSticky adds or removes one member and checks that the hash
// space that moves is the least possible for the new shares whenever the
// result is cut on the line, or both the old and the new assignment are
// whole partitions. Going from split partitions back to whole ones cannot
// reach the bound (a partition moves whole); TestAssignorMovementReport
// measures by how much.
func TestAssignSticky(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		weighted := rapid.Bool().Draw(t, "weighted")
		parts := genParts(weighted, 6).Draw(t, "parts")
		before := genMembers(weighted, 1, 12).Draw(t, "members")
		prev := Assign(parts, before, genValidPrev(t, weighted))
		after := slices.Clone(before)
		if len(before) > 1 && rapid.Bool().Draw(t, "leave") {
			i := rapid.IntRange(0, len(before)-1).Draw(t, "leaver")
			after = slices.Delete(after, i, i+1)
		} else {
			id := fmt.Sprintf("n%02d", rapid.IntRange(0, 9).Draw(t, "joiner"))
			after = append(after, MemberWeight{ID: id, Weight: rapid.IntRange(1, 3).Draw(t, "joinerWeight")})
		}
		out := Assign(parts, after, prev)
		if err := checkCover(parts, after, out); err != nil {
			t.Fatal(err)
		}
		mv, lb := moved(parts, prev, out), lowerBound(parts, prev, out)
		switch {
		case mv < lb:
			t.Fatalf("moved %d, below the lower bound %d: the measure is wrong", mv, lb)
		case len(after) > len(parts) && mv != lb:
			t.Fatalf("line mode moved %d, want the lower bound %d\nprev %v\nout %v", mv, lb, prev, out)
		case isWhole(prev) && isWhole(out) && mv != lb:
			t.Fatalf("whole mode moved %d, want the lower bound %d\nprev %v\nout %v", mv, lb, prev, out)
		}
	})
}

// bestWhole is the least weighted hash space any whole-partition assignment
// moves from prev when every member gets exactly one partition (len(members)
// == len(parts), equal weights): a maximum-weight matching of members to
// partitions by what they held, found by dynamic programming over subsets.
func bestWhole(parts []PartitionWeight, members []MemberWeight, prev []Slice) uint64 {
	idx := make(map[TopicPartition]int, len(parts))
	for i, p := range parts {
		idx[p.TopicPartition] = i
	}
	mi := make(map[string]int, len(members))
	for i, m := range members {
		mi[m.ID] = i
	}
	held := make([][]uint64, len(members))
	for i := range held {
		held[i] = make([]uint64, len(parts))
	}
	for _, s := range prev {
		i, ok1 := mi[s.Owner]
		j, ok2 := idx[s.TopicPartition]
		if ok1 && ok2 {
			held[i][j] += s.Range.Len() * weightOf(parts[j].Weight)
		}
	}
	// keep[mask] is the most that members 0..popcount(mask)-1 can keep
	// holding the partitions in mask.
	keep := make([]uint64, 1<<len(parts))
	for mask := 1; mask < len(keep); mask++ {
		i := bits.OnesCount(uint(mask)) - 1
		for j := range parts {
			if mask&(1<<j) != 0 {
				keep[mask] = max(keep[mask], keep[mask&^(1<<j)]+held[i][j])
			}
		}
	}
	return lineTotal(parts) - keep[len(keep)-1]
}

// TestAssignorMovementReport grows a group from 1 to 16 members one at a
// time and shrinks it back to 1 (the last to join leaving first, and again
// the first to join leaving first), with 1, 3 and 12 partitions. At each step
// it measures the hash space that moves against the lower bound for the new
// shares, and the partition reads (distinct member, partition pairs) against
// P + M − 1, and logs a table (docs/assignor.md shows it):
//
//	go test ./assign/ -run TestAssignorMovementReport -v
func TestAssignorMovementReport(t *testing.T) {
	t.Parallel()
	const maxM = 16
	all := make([]MemberWeight, maxM)
	for i := range all {
		all[i] = MemberWeight{ID: fmt.Sprintf("m%02d", i+1)}
	}
	type step struct {
		moved, bound uint64
		reads        int
	}
	var report strings.Builder
	for _, P := range []int{1, 3, 12} {
		parts := make([]PartitionWeight, P)
		for i := range parts {
			parts[i] = PartitionWeight{TopicPartition: tpOf("t", int32(i))}
		}
		total := float64(lineTotal(parts))
		// do runs Assign for one membership change and checks what the
		// assignor promises.
		do := func(prev []Slice, members []MemberWeight) ([]Slice, step) {
			t.Helper()
			M := len(members)
			out := Assign(parts, members, prev)
			if err := checkCover(parts, members, out); err != nil {
				t.Fatalf("P=%d M=%d: %v", P, M, err)
			}
			if err := checkShares(parts, members, false, out); err != nil {
				t.Fatalf("P=%d M=%d: %v", P, M, err)
			}
			s := step{moved: moved(parts, prev, out), bound: lowerBound(parts, prev, out), reads: reads(out)}
			switch {
			case M > P || isWhole(prev):
				if s.moved != s.bound {
					t.Errorf("P=%d M=%d: moved %d, want the lower bound %d", P, M, s.moved, s.bound)
				}
			default: // split partitions become whole again
				best := bestWhole(parts, members, prev)
				if s.moved < best || best < s.bound {
					t.Errorf("P=%d M=%d: moved %d, best whole assignment %d, bound %d", P, M, s.moved, best, s.bound)
				}
				fmt.Fprintf(&report, "P=%d, back to whole partitions at M=%d (%s): moved %.4f, lower bound %.4f, best whole assignment %.4f\n",
					P, M, members[0].ID+"…"+members[M-1].ID, float64(s.moved)/total, float64(s.bound)/total, float64(best)/total)
			}
			fresh := Assign(parts, members, nil)
			if M > P && reads(fresh) > P+M-1 {
				t.Errorf("P=%d M=%d: a fresh cut reads %d partitions, want <= %d", P, M, reads(fresh), P+M-1)
			}
			return out, s
		}

		join := make([]step, maxM+1)
		var freshMoved uint64
		prev := Assign(parts, all[:1], nil)
		for M := 2; M <= maxM; M++ {
			out, s := do(prev, all[:M])
			if before := reads(prev); s.reads > before+P {
				t.Errorf("P=%d M=%d: a join took reads from %d to %d, want at most %d more", P, M, before, s.reads, P)
			}
			freshMoved += moved(parts, Assign(parts, all[:M-1], nil), Assign(parts, all[:M], nil))
			join[M], prev = s, out
		}
		grown := prev
		leaveLast, leaveFirst := make([]step, maxM+1), make([]step, maxM+1)
		for _, c := range []struct {
			steps   []step
			members func(M int) []MemberWeight
		}{
			{leaveLast, func(M int) []MemberWeight { return all[:M] }},
			{leaveFirst, func(M int) []MemberWeight { return all[maxM-M:] }},
		} {
			prev := grown
			for M := maxM - 1; M >= 1; M-- {
				prev, c.steps[M] = do(prev, c.members(M))
			}
		}

		frac := func(n uint64) string { return fmt.Sprintf("%.4f", float64(n)/total) }
		fmt.Fprintf(&report, "\nP = %d. Moved and bound are fractions of all P × 2^32 hashes; reads are distinct (member, partition) pairs.\n\n", P)
		report.WriteString("| M | join: moved | bound | reads | leave, last in first: moved | bound | reads | leave, first in first: moved | bound | reads | P+M−1 | fresh cut reads |\n")
		report.WriteString("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		var sums [3]step
		for M := 1; M <= maxM; M++ {
			cells := []string{fmt.Sprint(M)}
			for i, s := range []step{join[M], leaveLast[M], leaveFirst[M]} {
				if (i == 0 && M == 1) || (i > 0 && M == maxM) {
					cells = append(cells, "–", "–", "–")
					continue
				}
				sums[i].moved += s.moved
				sums[i].bound += s.bound
				cells = append(cells, frac(s.moved), frac(s.bound), fmt.Sprint(s.reads))
			}
			cells = append(cells, fmt.Sprint(P+M-1), fmt.Sprint(reads(Assign(parts, all[:M], nil))))
			fmt.Fprintf(&report, "| %s |\n", strings.Join(cells, " | "))
		}
		fmt.Fprintf(&report, "| sum | %s | %s | | %s | %s | | %s | %s | | | |\n",
			frac(sums[0].moved), frac(sums[0].bound), frac(sums[1].moved), frac(sums[1].bound), frac(sums[2].moved), frac(sums[2].bound))
		fmt.Fprintf(&report, "\nRecomputing a fresh cut at every join instead would move %s in total (against %s) and keep reads at most P+M−1.\n\n", frac(freshMoved), frac(sums[0].moved))
		if sums[0].moved != sums[0].bound {
			t.Errorf("P=%d: joins moved %d in total, want the lower bound %d", P, sums[0].moved, sums[0].bound)
		}
	}
	t.Log("\n" + report.String())
}

// TestAssignWeightedShares measures how far members' shares stray from their
// weighted ideal when partitions have weights above 1, over fixed random
// histories of membership changes. Cuts inside a partition of weight w are
// rounded to whole hashes, i.e. to multiples of w on the line: a fresh cut
// stays within one hash of the heaviest partition; sticky cuts add up a
// little more. checkShares asserts the bounds; this test logs what they are
// in practice.
func TestAssignWeightedShares(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	var worstFresh, worstSticky float64 // in hashes of the heaviest partition
	for range 1000 {
		P := 1 + r.IntN(5)
		parts := make([]PartitionWeight, P)
		wmax := 1
		for i := range parts {
			parts[i] = PartitionWeight{TopicPartition: tpOf("t", int32(i)), Weight: 1 + r.IntN(7)}
			wmax = max(wmax, parts[i].Weight)
		}
		pool := make([]MemberWeight, P+1+r.IntN(10))
		for i := range pool {
			pool[i] = MemberWeight{ID: fmt.Sprintf("m%02d", i), Weight: 1 + r.IntN(3)}
		}
		var prev []Slice
		for step := range 6 {
			var members []MemberWeight
			for _, m := range pool {
				if r.IntN(4) > 0 {
					members = append(members, m)
				}
			}
			if len(members) <= P {
				members = pool
			}
			out := Assign(parts, members, prev)
			if err := checkCover(parts, members, out); err != nil {
				t.Fatal(err)
			}
			if err := checkShares(parts, members, prev == nil, out); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			var wsum uint64
			for _, m := range members {
				wsum += weightOf(m.Weight)
			}
			sh := shares(parts, out)
			for _, m := range members {
				lo, hi := ideal(lineTotal(parts), weightOf(m.Weight), wsum)
				d := float64(distance(sh[m.ID], lo, hi)) / float64(wmax)
				if prev == nil {
					worstFresh = max(worstFresh, d)
				} else {
					worstSticky = max(worstSticky, d)
				}
			}
			prev = out
		}
	}
	t.Logf("largest distance from the weighted ideal, in hashes of the heaviest partition: fresh cut %.2f, sticky cut %.2f", worstFresh, worstSticky)
}

func TestQuotas(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		total   uint64
		members []MemberWeight
		want    map[string]uint64
	}{
		{"even", 6, []MemberWeight{mw("a", 1), mw("b", 1), mw("c", 1)}, map[string]uint64{"a": 2, "b": 2, "c": 2}},
		{"ties go to the earlier member", 5, []MemberWeight{mw("a", 1), mw("b", 1), mw("c", 1)}, map[string]uint64{"a": 2, "b": 2, "c": 1}},
		{"largest remainder first", 10, []MemberWeight{mw("a", 1), mw("b", 2)}, map[string]uint64{"a": 3, "b": 7}},
		{"weights zero and negative count as one", 3, []MemberWeight{mw("a", 0), mw("b", -1), mw("c", 1)}, map[string]uint64{"a": 1, "b": 1, "c": 1}},
		{"a share may be zero", 1, []MemberWeight{mw("a", 1), mw("b", 5)}, map[string]uint64{"a": 0, "b": 1}},
		{"nothing to share", 0, []MemberWeight{mw("a", 1)}, map[string]uint64{"a": 0}},
		{"a long line does not overflow", 10000 * hs, []MemberWeight{mw("a", MaxWeight-1), mw("b", MaxWeight)},
			map[string]uint64{"a": 21474825742576, "b": 21474847217424}},
		{"weights above MaxWeight count as MaxWeight", 4, []MemberWeight{mw("a", math.MaxInt64), mw("b", math.MaxInt64), mw("c", 2)},
			map[string]uint64{"a": 2, "b": 2, "c": 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := quotas(tt.total, tt.members)
			if len(got) != len(tt.want) {
				t.Fatalf("quotas = %v, want %v", got, tt.want)
			}
			for id, w := range tt.want {
				if got[id] != w {
					t.Fatalf("quotas = %v, want %v", got, tt.want)
				}
			}
		})
	}
	t.Run("property", func(t *testing.T) {
		t.Parallel()
		rapid.Check(t, func(t *rapid.T) {
			total := rapid.OneOf(rapid.Uint64Range(0, 100), rapid.Uint64Range(0, 64*hs)).Draw(t, "total")
			members := genMembers(true, 1, 16).Draw(t, "members")
			q := quotas(total, members)
			var sum, wsum uint64
			for _, m := range members {
				wsum += weightOf(m.Weight)
			}
			for _, m := range members {
				lo, hi := ideal(total, weightOf(m.Weight), wsum)
				if q[m.ID] < lo || q[m.ID] > hi {
					t.Fatalf("member %s (weight %d of %d) gets %d of %d, want %d..%d", m.ID, m.Weight, wsum, q[m.ID], total, lo, hi)
				}
				sum += q[m.ID]
			}
			if sum != total {
				t.Fatalf("quotas add up to %d, want %d", sum, total)
			}
		})
	})
}

// TestAssignHugeWeights: weights that would wrap a 64-bit sum (three members
// of MaxInt64, MaxInt64 and 2 sum to 0 modulo 2^64) must not panic the
// leader; they count as MaxWeight.
func TestAssignHugeWeights(t *testing.T) {
	t.Parallel()
	for _, parts := range [][]PartitionWeight{
		{pw("t", 0, 1)}, // line mode
		{pw("t", 0, 1), pw("t", 1, 1), pw("t", 2, 1), pw("t", 3, 1)}, // whole mode
	} {
		members := []MemberWeight{mw("a", math.MaxInt64), mw("b", math.MaxInt64), mw("c", 2)}
		out := Assign(parts, members, nil)
		if err := checkCover(parts, members, out); err != nil {
			t.Fatalf("%d partitions: %v", len(parts), err)
		}
	}
}
