// Package chaos attacks keyshare's guarantees with real faults and checks
// the history afterwards, in the manner of etcd's robustness tests and
// Jepsen's Kafka checks. Members run as separate `keyshare member` processes
// so that they can be killed, paused and restarted for real; etcd and the
// Kafka-protocol broker run in the test process.
//
// For every row of the fault matrix the checker reads the members' record
// logs, the producer's acknowledged records and every Kafka commit it
// observed, and reports: records lost, duplicates, per-key order violations,
// commit regressions, commits that passed an unhandled record, and the time
// to recover.
//
//	go test ./chaos/                                     # short form (make test)
//	KEYSHARE_CHAOS=long go test -timeout 30m ./chaos/    # long form (make chaos),
//	                                                     # writes docs/reliability.md
package chaos
