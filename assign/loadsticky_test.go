package assign

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestStickyByLoad: a join or a leave on a layout balanced by load keeps
// the load balanced and moves far less than placing it by width (which
// would move the hash space of the skew back and forth).
func TestStickyByLoad(t *testing.T) {
	t.Parallel()
	tp := tpOf("t", 0)
	parts := []PartitionWeight{{TopicPartition: tp}}
	members := []MemberWeight{mw("a", 1), mw("b", 1), mw("c", 1), mw("d", 1)}
	truth := skew{parts: map[TopicPartition][64]float64{tp: front(8, 0.8, 10)}}
	width := Assign(parts, members, nil)
	balanced := BalanceByLoad(parts, members, width, truth.reportsOf(width), 1.25).Want
	for _, c := range []struct {
		name    string
		members []MemberWeight
	}{
		{"join", append(slices.Clone(members), mw("e", 1))},
		{"leave", members[1:]},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := StickyByLoad(parts, c.members, balanced, truth.reportsOf(balanced), nil)
			if err := checkCover(parts, c.members, got); err != nil {
				t.Fatal(err)
			}
			ideal := truth.total() / float64(len(c.members))
			if b := maxOf(truth.trueLoads(got)); b > 1.15*ideal {
				t.Fatalf("busiest %.3f after the %s, ideal %.3f: %v", b, c.name, ideal, truth.trueLoads(got))
			}
			byWidth := Assign(parts, c.members, balanced)
			t.Logf("%s: busiest %.3f (ideal %.3f; by width %.3f), hash space moved %.3f (by width %.3f)", c.name,
				maxOf(truth.trueLoads(got)), ideal, maxOf(truth.trueLoads(byWidth)), movedShare(balanced, got, 1), movedShare(balanced, byWidth, 1))
			if m, w := movedShare(balanced, got, 1), movedShare(balanced, byWidth, 1); m >= w/2 {
				t.Fatalf("moved %.3f of the hash space, by width %.3f: want less than half", m, w)
			}
			// What moves is about the load the change calls for: a join
			// takes a fifth of the load to the newcomer, a leave hands
			// out the leaver's quarter.
			var movedLoad float64
			for _, s := range got {
				for _, o := range balanced {
					if o.TopicPartition == s.TopicPartition && o.Owner != s.Owner {
						r := o.Range.Intersect(s.Range)
						movedLoad += truth.busy(s.TopicPartition, r.Lo, r.Hi)
					}
				}
			}
			if share := movedLoad / truth.total(); share > 0.3 {
				t.Fatalf("moved %.3f of the load", share)
			}
		})
	}
	// Tidying the join into one span per member puts the newcomer where
	// the least moves (measured: 0.31 of the hash space, against 0.66
	// with the newcomer at the end, where its largest sliver is).
	joined := StickyByLoad(parts, append(slices.Clone(members), mw("e", 1)), balanced, truth.reportsOf(balanced), nil)
	tidy := BalanceByLoad(parts, append(slices.Clone(members), mw("e", 1)), joined, truth.reportsOf(joined), 1.25)
	checkContiguous(t, tidy.Want)
	if tidy.Moved > 0.4 || tidy.After > 1.05*tidy.Before {
		t.Fatalf("tidying the join moves %.3f of the hash space, busiest %.3f → %.3f: want under 0.4, no busier", tidy.Moved, tidy.Before, tidy.After)
	}
	if StickyByLoad(parts, members[:1], balanced, truth.reportsOf(balanced), nil) != nil {
		t.Fatal("whole-partition mode placed by load: want nil (width places it)")
	}
	if StickyByLoad(parts, members, balanced, nil, nil) != nil {
		t.Fatal("placed by load without reports")
	}
}

// TestStickyByLoadProperties: on random skews and changes of members the
// answer covers every partition exactly, with members only, each member
// within one hash's load (the busiest hash) of its share, and does not
// depend on the order of the inputs.
func TestStickyByLoadProperties(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		parts := genParts(false, 4).Draw(t, "parts")
		before := genMembers(true, 1, 10).Draw(t, "before")
		after := genMembers(true, 1, 10).Draw(t, "after")
		parts, after = sortedUnique(parts, after)
		truth := drawSkew(t, parts, 50)
		cur := Assign(parts, before, nil)
		reports := truth.reportsOf(cur)
		got := StickyByLoad(parts, after, cur, reports, nil)
		if len(after) <= len(parts) || truth.total() == 0 {
			if got != nil && len(after) <= len(parts) {
				t.Fatalf("whole mode placed by load")
			}
			return
		}
		if got == nil {
			t.Fatal("nil on a line with load")
		}
		if err := checkCover(parts, after, got); err != nil {
			t.Fatal(err)
		}
		tps := make([]TopicPartition, len(parts))
		for i, p := range parts {
			tps[i] = p.TopicPartition
		}
		l, _ := newLoadLine(tps, cur, reports)
		var sumW, hottest float64
		for _, m := range after {
			sumW += float64(memberWeight(m.Weight))
		}
		for _, p := range l.pieces {
			hottest = max(hottest, p.per)
		}
		load := map[string]float64{}
		for _, s := range got {
			lo, _ := l.position(s.TopicPartition, s.Range.Lo)
			load[s.Owner] += l.between(lo, lo+s.Range.Len())
		}
		for _, m := range after {
			quota := l.load * float64(memberWeight(m.Weight)) / sumW
			if load[m.ID] > quota+hottest+1e-6*l.load {
				t.Fatalf("%s carries %.4f, quota %.4f, busiest hash %.4f", m.ID, load[m.ID], quota, hottest)
			}
		}
		rev := slices.Clone(cur)
		slices.Reverse(rev)
		if !slices.Equal(got, StickyByLoad(parts, after, rev, reports, nil)) {
			t.Fatal("answer depends on the order of cur")
		}
	})
}
