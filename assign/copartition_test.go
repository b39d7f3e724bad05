package assign

import (
	"slices"
	"testing"

	"github.com/keyshare/keyshare/ledger"
)

// TestCoPartition: the second topic of a set takes the first's ranges and
// owners partition by partition, whether the layout had slices of it or
// not; a topic in no set, and a partition the first topic lacks, keep
// their own.
func TestCoPartition(t *testing.T) {
	half := ledger.HashSpace / 2
	tp := func(topic string, p int32) TopicPartition { return TopicPartition{Topic: topic, Partition: p} }
	layout := []Slice{
		{tp("orders", 0), ledger.HashRange{Lo: 0, Hi: half}, "a"},
		{tp("orders", 0), ledger.HashRange{Lo: half, Hi: ledger.HashSpace}, "b"},
		{tp("customers", 0), ledger.Full, "c"},
		{tp("customers", 1), ledger.Full, "c"}, // orders has no partition 1
		{tp("other", 0), ledger.Full, "b"},
	}
	parts := []PartitionWeight{{tp("orders", 0), 1}, {tp("customers", 0), 1}, {tp("customers", 1), 1}, {tp("other", 0), 1}}
	sets := [][]string{{"orders", "customers"}}
	got := CoPartition(layout, parts, sets)
	want := []Slice{
		{tp("orders", 0), ledger.HashRange{Lo: 0, Hi: half}, "a"},
		{tp("orders", 0), ledger.HashRange{Lo: half, Hi: ledger.HashSpace}, "b"},
		{tp("customers", 1), ledger.Full, "c"},
		{tp("other", 0), ledger.Full, "b"},
		{tp("customers", 0), ledger.HashRange{Lo: 0, Hi: half}, "a"},
		{tp("customers", 0), ledger.HashRange{Lo: half, Hi: ledger.HashSpace}, "b"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d slices, want %d: %v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("slice %d: %v, want %v", i, got[i], want[i])
		}
	}
	if out := CoPartition(layout, parts, nil); len(out) != len(layout) {
		t.Errorf("no sets changed the layout")
	}
	// The assignor's input leaves out customers/0, which orders/0 leads;
	// customers/1 stays. Its layout without customers/0 gets the copy.
	leads := CoPartitionLeads(parts, sets)
	if len(leads) != 3 || leads[1].TopicPartition != tp("customers", 1) {
		t.Errorf("leads %v, want orders/0, customers/1, other/0", leads)
	}
	without := slices.DeleteFunc(slices.Clone(layout), func(s Slice) bool { return s.TopicPartition == tp("customers", 0) })
	if got := CoPartition(without, parts, sets); !slices.Equal(got, want) {
		t.Errorf("from the leads' layout: %v, want %v", got, want)
	}
}
