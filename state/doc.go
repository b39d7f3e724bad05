// Package state is what a group keeps in etcd: its records (range records,
// ledger entries by way of package ledger, registrations, the generation,
// commits, load reports, handoff plans, the pause, topic ids), which are a
// compatibility contract between versions; their strict decoding, which
// calls a value damaged rather than guess (BadValueError); and Snapshot,
// all of a group's state decoded at one revision. It does no I/O: coord
// reads etcd and hands the keys to BuildSnapshot, and the leader's planner
// decides on the Snapshot. The package imports no etcd and no Kafka client
// (internal/purity's TestImportsArePure holds it to that); docs/etcd-keys.md lists the keys.
//
// Decoding a group's keys read at one revision:
//
//	g := state.Group{Name: "orders"}
//	var kvs state.GroupKVs // members, ranges, ledger, commits, generation, stuck, lost
//	kvs[1] = append(kvs[1], state.KeyValue{Key: key, Value: value, ModRevision: rev})
//	snap := state.BuildSnapshot(g, readRev, kvs, nil)
//	for _, r := range snap.Owned("member-1") {
//		fmt.Println(r.TP(), r.Record.Range(), r.Record.State)
//	}
//	for _, err := range snap.Problems { // damaged values, left out of every view
//		fmt.Println(err)
//	}
package state
