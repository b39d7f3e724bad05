package main

import (
	"math"
	"testing"

	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

func layout(parts ...schema.RangeRecord) []schema.RangeState {
	var out []schema.RangeState
	for _, r := range parts {
		r.Topic = "t"
		out = append(out, schema.RangeState{Record: r})
	}
	return out
}

// TestOwnerChange: the hash space moved between two layouts is what
// changed owner, wherever the cuts are, in partitions' worth.
func TestOwnerChange(t *testing.T) {
	q := ledger.HashSpace / 4
	before := layout(
		schema.RangeRecord{Partition: 0, Lo: 0, Hi: 2 * q, Owner: "a"},
		schema.RangeRecord{Partition: 0, Lo: 2 * q, Hi: ledger.HashSpace, Owner: "b"},
		schema.RangeRecord{Partition: 1, Lo: 0, Hi: ledger.HashSpace, Owner: "c"},
	)
	// Partition 0 cut at q and 3q: [q, 2q) goes from a to c, [2q, 3q)
	// stays b's, [3q, 4q) goes from b to a. Partition 1 unchanged.
	after := layout(
		schema.RangeRecord{Partition: 0, Lo: 0, Hi: q, Owner: "a"},
		schema.RangeRecord{Partition: 0, Lo: q, Hi: 2 * q, Owner: "c"},
		schema.RangeRecord{Partition: 0, Lo: 2 * q, Hi: 3 * q, Owner: "b"},
		schema.RangeRecord{Partition: 0, Lo: 3 * q, Hi: ledger.HashSpace, Owner: "a"},
		schema.RangeRecord{Partition: 1, Lo: 0, Hi: ledger.HashSpace, Owner: "c"},
	)
	if got := ownerChange(before, after); math.Abs(got-0.5) > 1e-12 {
		t.Errorf("moved %v, want 0.5 (two quarters of partition 0)", got)
	}
	if got := ownerChange(before, before); got != 0 {
		t.Errorf("same layout: moved %v, want 0", got)
	}
	// A partition's range disappearing (between owners) counts.
	if got := ownerChange(before, before[:2]); math.Abs(got-1) > 1e-12 {
		t.Errorf("partition 1 gone: moved %v, want 1", got)
	}
}

// TestSkewWorkloads: the Zipf workload's hottest key has about 15% of
// the records (the floor docs/benchmarks.md states), the uneven one puts
// about 55% on partition 0 and none of its keys near that share, and a
// changing workload's second half moves the load.
func TestSkewWorkloads(t *testing.T) {
	z := zipfWorkload("z", 1, 20_000, false)
	if _, _, p1 := z.floors(1); p1 < 0.13 || p1 > 0.17 {
		t.Errorf("Zipf s=1.1 over 10,000 keys: hottest key's share %.3f, want about 0.15", p1)
	}
	u := unevenWorkload("u", 40_000, true)
	first, second := map[int32]int{}, map[int32]int{}
	for _, r := range u.recs {
		if r.second {
			second[r.part]++
		} else {
			first[r.part]++
		}
	}
	if s := float64(first[0]) / 20_000; s < 0.53 || s > 0.57 {
		t.Errorf("uneven first half: partition 0 has %.3f, want about 0.55", s)
	}
	if s := float64(second[2]) / 20_000; s < 0.53 || s > 0.57 {
		t.Errorf("uneven second half: partition 2 has %.3f, want about 0.55", s)
	}
	if _, _, p1 := u.floors(1); p1 > 0.01 {
		t.Errorf("uneven: hottest key has %.3f of the records, want uniform keys", p1)
	}
}
