package assign

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// checkContiguous fails if some member's slices are not one run along the
// line (partitions in order, each by hash): once another owner's slice comes
// after a member's, that member may not appear again.
func checkContiguous(t interface{ Fatalf(string, ...any) }, out []Slice) {
	sorted := slices.Clone(out)
	slices.SortFunc(sorted, func(a, b Slice) int {
		if c := CompareTP(a.TopicPartition, b.TopicPartition); c != 0 {
			return c
		}
		return int(a.Range.Lo) - int(b.Range.Lo)
	})
	done := map[string]bool{}
	for i, s := range sorted {
		if done[s.Owner] {
			t.Fatalf("member %s owns %v after another member's slice: not one span\n%v", s.Owner, s, sorted)
		}
		if i > 0 && sorted[i-1].Owner != s.Owner {
			done[sorted[i-1].Owner] = true
		}
	}
}

func TestAssignContiguousProperties(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		weighted := rapid.Bool().Draw(t, "weighted")
		parts := genParts(weighted, 8).Draw(t, "parts")
		members := genMembers(weighted, 1, 14).Draw(t, "members")
		var prev []Slice
		if rapid.Bool().Draw(t, "with prev") {
			prev = genValidPrev(t, weighted)
		}
		out := AssignContiguous(parts, members, prev)
		if err := checkCover(parts, members, out); err != nil {
			t.Fatal(err)
		}
		P, M := len(parts), len(members)
		if M <= P {
			if !isWhole(out) {
				t.Fatalf("%d members, %d partitions: want whole partitions, got %v", M, P, out)
			}
		} else {
			checkContiguous(t, out)
			if reads(out) > P+M-1 {
				t.Fatalf("%d partitions among %d members read %d partitions, want <= %d", P, M, reads(out), P+M-1)
			}
			if len(out) > P+M-1 {
				t.Fatalf("%d slices, want <= P+M-1 = %d", len(out), P+M-1)
			}
		}
		if err := checkShares(parts, members, true, out); err != nil {
			t.Fatal(err)
		}
		p2 := rapid.Permutation(parts).Draw(t, "partsShuffled")
		m2 := rapid.Permutation(members).Draw(t, "membersShuffled")
		v2 := rapid.Permutation(prev).Draw(t, "prevShuffled")
		if got := AssignContiguous(p2, m2, v2); !slices.Equal(got, out) {
			t.Fatalf("inputs in another order give another assignment:\n  %v\nwant\n  %v", got, out)
		}
		// A contiguous layout of the same members is kept as it is.
		if again := AssignContiguous(parts, members, out); !slices.Equal(again, out) {
			t.Fatalf("not kept:\n  %v\nwant\n  %v", again, out)
		}
	})
}

// TestAssignContiguousJoins: members joining one partition one by one, with
// the layout recomputed at each join, keep one slice each, and each join
// moves at most half the hash space. (Assign alone moves the least, 1/(M+1)
// of the space, but leaves the newcomer M slivers.)
func TestAssignContiguousJoins(t *testing.T) {
	t.Parallel()
	parts := []PartitionWeight{pw("t", 0, 1)}
	var members []MemberWeight
	var prev []Slice
	for i := range 65 {
		members = append(members, mw(string(rune('A'+i/26))+string(rune('a'+i%26)), 1))
		out := AssignContiguous(parts, members, prev)
		if len(members) > 1 && len(out) != len(members) {
			t.Fatalf("%d members: %d slices", len(members), len(out))
		}
		if mv := moved(parts, prev, out); prev != nil && mv > hs/2 {
			t.Fatalf("%d members: moved %d, more than half of %d", len(members), mv, uint64(hs))
		}
		prev = out
	}
}

// TestAssignContiguousNewcomerPlacement: a newcomer goes where the most stays
// in place: between the two members, not at an end.
func TestAssignContiguousNewcomerPlacement(t *testing.T) {
	t.Parallel()
	parts := []PartitionWeight{pw("t", 0, 1)}
	prev := []Slice{sl("t", 0, 0, half, "a"), sl("t", 0, half, hs, "c")}
	out := AssignContiguous(parts, []MemberWeight{mw("a", 1), mw("b", 1), mw("c", 1)}, prev)
	third := uint64(hs) / 3
	want := []Slice{sl("t", 0, 0, third+1, "a"), sl("t", 0, third+1, 2*third+1, "b"), sl("t", 0, 2*third+1, hs, "c")}
	if !slices.Equal(out, want) {
		t.Fatalf("got %v\nwant %v", out, want)
	}
	if mv, lb := moved(parts, prev, out), lowerBound(parts, prev, out); mv != lb {
		t.Fatalf("moved %d, want the least possible %d", mv, lb)
	}
}
