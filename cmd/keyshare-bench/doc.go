// Command keyshare-bench measures keyshare against a vanilla Kafka
// consumer group on the same data in the same run, on the bundled cluster
// (embedded etcd and kfake, or Apache Kafka with --kafka apache), and
// writes the report of docs/benchmarks.md. It is the lab, apart from the
// keyshare binary that operators install: the scenarios that time member
// processes run its own `keyshare-bench member`, keyshare member's command
// (cmd/internal/membercmd) with simulated work, failures, a stuck key, a
// record log and an etcd audit log besides --deliver (member.go). The
// fault matrix (chaos/) and the tests of keyshare's other commands run it
// too.
//
//	make bench                                   # builds both, writes docs/benchmarks.md
//	bin/keyshare-bench --quick --runs 1          # a smoke test of the benchmark itself
//	bin/keyshare-bench --only skew,groups
//	bin/keyshare-bench member --group g --topic orders --work uniform:0-2ms --record m1.jsonl
//	bin/keyshare-bench --kafka apache --only throughput --runs 1  # one partition: kcat, a bare client, members
//
// Run 'keyshare-bench -h' for its flags.
package main
