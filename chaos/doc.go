// Package chaos attacks keyshare's guarantees with real faults and checks
// the history afterwards, in the manner of etcd's robustness tests and
// Jepsen's Kafka checks. Members run as separate `keyshare-bench member`
// processes (keyshare member's command with simulated work, a record log
// and an audit log; the rolling-upgrade row runs the previous release's
// `keyshare member`, which still had them) so that they can be killed,
// paused and restarted for real; etcd and the Kafka-protocol broker run in
// the test process.
//
// For every row of the fault matrix the checker reads the members' record
// logs, the producer's acknowledged records, every Kafka commit it observed,
// the loss reports in etcd, and the members' audit logs of accepted etcd
// writes replayed against etcd's history. It reports: records lost, records
// lost to retention (reported), duplicates, per-key order violations, commit
// regressions, commits that passed an unhandled record, stale writes
// accepted, the time to recover, and the smallest gap between an old and a
// new owner's record starts of one key (negative: both ran it at once).
//
// Rows 16a–16e cut the network: each member runs on a host of its own (a
// network namespace, testutil/netns) and is cut from etcd or from Kafka
// alone. They need root and `ip netns`, and are skipped otherwise.
//
// Rows S1–S7 (state_test.go) run `keyshare member --deliver --state`
// against a counting endpoint and check that every key's count in the
// changelog equals its records; TestStateCheckFailsSkipOff proves the check
// bites with the skip rule off.
//
// Rows named "EO …" rerun rows 2, 3, 4, 5, 16a and 17 exactly-once: the
// members deliver (--deliver) to an endpoint in the test process that
// applies each record through package pgsink on a real PostgreSQL under
// the request's fence, and the database is checked too: every
// acknowledged record's effect exactly once, each key's in offset order,
// and in the zombie row its delayed writes under old tokens all refused.
// KEYSHARE_CHAOS_MEMBER_ARGS's simulated-work flags (--work, --record,
// --fail-rate, --stall) are dropped for these rows; --batch-size stays.
//
//	go test ./chaos/                                     # short form (make test)
//	KEYSHARE_CHAOS=long go test -timeout 30m ./chaos/    # long form (make chaos),
//	                                                     # writes docs/reliability.md
//	KEYSHARE_CHAOS_LOGS=1 go test -v -run 'TestFaultMatrix/9a' ./chaos/
//	                                                     # a row with its members' logs
//	KEYSHARE_CHAOS_MEMBER_ARGS='--batch-size 50 --work call:1ms+0.02ms' go test ./chaos/
//	                                                     # the members with a BatchHandler
//	KEYSHARE_KAFKA=apache KEYSHARE_CHAOS=long go test -run 'TestFaultMatrix/11[b-e]' ./chaos/
//	                                                     # Apache Kafka's own faults: rows 11c-11e
//	                                                     # run only there (three brokers)
package chaos
