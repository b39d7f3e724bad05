package assign_test

import (
	"fmt"

	"github.com/keyshare/keyshare/assign"
)

// Two members share three partitions, then a third joins: with no more
// members than partitions each gets whole ones, and the newcomer takes one
// partition while the others keep theirs.
func ExampleAssign() {
	parts := []assign.PartitionWeight{
		{TopicPartition: assign.TopicPartition{Topic: "orders", Partition: 0}},
		{TopicPartition: assign.TopicPartition{Topic: "orders", Partition: 1}},
		{TopicPartition: assign.TopicPartition{Topic: "orders", Partition: 2}},
	}
	two := assign.Assign(parts, []assign.MemberWeight{{ID: "a"}, {ID: "b"}}, nil)
	for _, s := range two {
		fmt.Println(s.TopicPartition, s.Range, s.Owner)
	}
	three := assign.Assign(parts, []assign.MemberWeight{{ID: "a"}, {ID: "b"}, {ID: "c"}}, two)
	for _, s := range three {
		fmt.Println(s.TopicPartition, s.Range, s.Owner)
	}
	// Output:
	// {orders 0} [0,4294967296) a
	// {orders 1} [0,4294967296) a
	// {orders 2} [0,4294967296) b
	// {orders 0} [0,4294967296) a
	// {orders 1} [0,4294967296) c
	// {orders 2} [0,4294967296) b
}
