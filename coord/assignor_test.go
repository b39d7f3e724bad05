package coord

import (
	"fmt"
	"testing"

	"github.com/keyshare/keyshare/ledger"
)

func TestExploreBadRange(t *testing.T) {
	tp := TopicPartition{"t", 0}
	parts := []PartitionWeight{{TopicPartition: tp}}
	members := []MemberWeight{{ID: "a"}, {ID: "b"}}
	func() {
		defer func() { fmt.Println("recovered:", recover()) }()
		out := Assign(parts, members, []Slice{{TopicPartition: tp, Range: ledger.HashRange{Lo: ledger.HashSpace - 10, Hi: 2 * ledger.HashSpace}, Owner: "a"}})
		fmt.Println(out)
	}()
	func() {
		defer func() { fmt.Println("recovered:", recover()) }()
		out := Assign(parts, members, []Slice{{TopicPartition: tp, Range: ledger.HashRange{Lo: 100, Hi: 10}, Owner: "a"}})
		fmt.Println(out)
	}()
	func() {
		defer func() { fmt.Println("recovered:", recover()) }()
		out := Assign(parts, members, []Slice{{TopicPartition: tp, Range: ledger.HashRange{Lo: ledger.HashSpace - 100, Hi: 10}, Owner: "a"}})
		fmt.Println(out)
	}()
	// overlapping same lo, different owners, in two orders
	p1 := []Slice{{TopicPartition: tp, Range: ledger.HashRange{Lo: 0, Hi: 100}, Owner: "a"}, {TopicPartition: tp, Range: ledger.HashRange{Lo: 0, Hi: 200}, Owner: "b"}}
	p2 := []Slice{p1[1], p1[0]}
	m3 := []MemberWeight{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	fmt.Println(Assign(parts, m3, p1))
	fmt.Println(Assign(parts, m3, p2))
}
