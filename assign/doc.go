// Package assign decides which member owns which hash range of every
// partition: the assignor (Assign, a sticky cut of the line of partitions
// by member weight), its contiguous layout (AssignContiguous), and the
// layouts balanced by measured load (BalanceByLoad, StickyByLoad). They are
// pure functions of their inputs, with no I/O: coord's leader reads the
// group from etcd, calls them, and writes the answer as range records.
// The package imports no etcd and no Kafka client (the package map's test,
// docs/packagemap_test.go, holds it to that); docs/assignor.md and
// docs/load.md explain the algorithms.
//
// Two members sharing three partitions, then a third joining:
//
//	parts := []assign.PartitionWeight{
//		{TopicPartition: assign.TopicPartition{Topic: "orders", Partition: 0}},
//		{TopicPartition: assign.TopicPartition{Topic: "orders", Partition: 1}},
//		{TopicPartition: assign.TopicPartition{Topic: "orders", Partition: 2}},
//	}
//	two := assign.Assign(parts, []assign.MemberWeight{{ID: "a"}, {ID: "b"}}, nil)
//	// whole partitions (no more members than partitions): a owns 0 and 1, b owns 2
//	three := assign.Assign(parts, []assign.MemberWeight{{ID: "a"}, {ID: "b"}, {ID: "c"}}, two)
//	// sticky: c takes partition 1 from a; a keeps 0, b keeps 2 (ExampleAssign)
//	for _, s := range three {
//		fmt.Println(s.TopicPartition, s.Range, s.Owner)
//	}
package assign
