// Package schema is what a group keeps in etcd: the layout of its keys
// (Keys, made by Group.Keys, and the parsers of the keys it builds) and its
// records (range records, ledger entries by way of package ledger,
// registrations, the generation, commits, load reports, handoff plans, the
// pause, topic ids), which are a compatibility contract between versions; their strict decoding, which
// calls a value damaged rather than guess (BadValueError); and Snapshot,
// all of a group's state decoded at one revision. It does no I/O: coord
// reads etcd and hands the keys to BuildSnapshot, and the leader's planner
// decides on the Snapshot. The package imports no etcd and no Kafka client
// (docs/packagemap_test.go holds it to that).
//
// Decoding a group's keys read at one revision:
//
//	g := schema.Group{Name: "orders"}
//	var kvs schema.GroupKVs // members, ranges, ledger, commits, generation, stuck, lost
//	kvs[1] = append(kvs[1], schema.KeyValue{Key: key, Value: value, ModRevision: rev})
//	snap := schema.BuildSnapshot(g, readRev, kvs, nil)
//	for _, r := range snap.Owned("member-1") {
//		fmt.Println(r.TP(), r.Record.Range(), r.Record.State)
//	}
//	for _, err := range snap.Problems { // damaged values, left out of every view
//		fmt.Println(err)
//	}
//
// # The keys
//
// Keys is the only code that builds etcd keys. Under a group's root (default
// /keyshare/<group>/):
//
//	members/<member-id>                 member registration, under the member's lease
//	subscriptions/<member-id>           the topics the member consumes, under its lease
//	election/<lease-id-hex>             leader election, under the candidate's lease (coord/election.go)
//	generation                          assignment generation, written by the leader
//	ranges/<topic>/<ppppp>/<llllllllll> owner and handoff state of one hash range
//	ledger/<topic>/<ppppp>/<llllllllll> completion state of the same range
//	commits/<topic>/<ppppp>             safe offset the leader committed to Kafka
//	stuck/<topic>/<ppppp>/<llllllllll>  a range held by a stuck record, under its owner's lease
//	lost/<topic>/<ppppp>/<llllllllll>/<ssssssssssssssssssss>
//	                                    records the range lost to retention; <s> is the log start
//	paused                              the group is paused by an operator (keyshare group pause)
//	topics/<topic>                      the Kafka topic id the group's state of the topic belongs to
//	load/<member-id>                    the member's load report, under its lease
//	leaving/<member-id>                 a leaving member's drain budget, under its lease
//	handoffs/<member-id>                the leader's handoff plan for a leaving member
//	hotkeys/<member-id>                 the keys behind the load report's hot hashes, under its lease
//	keyops/<topic>/<ppppp>/<hhhhhhhhhh>/<key-b64url>
//	                                    an operator's operation on one key (keyshare key skip)
//
// No other name lives directly under the root (foreign.go relies on it).
// <ppppp> is the partition, 5 digits; <llllllllll> is the range's first hash,
// 10 digits, so keys sort by partition and then by hash as a human expects.
// Every value is JSON with a version field "v". docs/etcd-keys.md shows real
// output of `etcdctl get --prefix`.
package schema
