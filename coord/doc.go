// Package coord is keyshare's coordination in etcd: member sessions and
// registration, leader election, the leader's rounds (the planner is
// coord/internal/plan's, a pure function of a Snapshot returning guards and
// writes as data, which coord alone turns into etcd transactions), a
// member's view of its assignment, the two-phase handoff of
// revoked ranges, and every fenced write a member or the leader makes. It is
// the only package that talks to etcd: callers say what they want (flush
// these ranges, release this range, record this commit) and coord builds the
// guarded transactions. What a group stores, its strict decoding and the
// Snapshot are package state's, and the assignor's types package assign's;
// coord's functions take and return them. The key schema is written down in
// docs/etcd-keys.md.
//
// A member joins with an etcd client and a Config, follows its assignment,
// writes the ledger of what it owns, and releases what the leader revokes:
//
//	cfg := coord.DefaultConfig()
//	cfg.Group, cfg.Topics = "orders-app", []string{"orders"}
//	cfg.Partitions = countPartitions // e.g. from Kafka metadata
//	sess, err := coord.Join(ctx, cli, cfg)
//	if err != nil { ... }
//	defer sess.Close()
//	for {
//		select {
//		case a := <-sess.Updates():
//			// start, keep, drain (state.RangeState.Record.State is revoking)
//			// or drop each range of a.Ranges
//		case <-sess.Ctx().Done():
//			return // session lost: stop all owned work at once
//		}
//	}
//
//	// every flush interval, for the ranges whose state changed:
//	err = sess.Flush(ctx, []coord.RangeFlush{{Range: r, Entry: st.Entry()}})
//	var fenced *coord.FencedError
//	if errors.As(err, &fenced) {
//		// fenced.Keys are no longer ours: reread the assignment
//	}
//	// a revoked range, once its in-flight records are done:
//	err = sess.ReleaseRanges(ctx, []coord.RangeRelease{{Range: r, Final: st.Entry()}})
//
// Every write of a member carries two compares in the same transaction:
// its registration still exists (its session is alive), and the range
// record is unchanged since it was assigned (nobody moved it). A leader's
// writes compare the create revision of its election key. A writer that
// has lost either is fenced: its write changes nothing.
//
// Tools outside a member read a group with ReadSnapshot (one transaction),
// naming it with a state.Group; ReadPause, WritePause and DeletePause pause and
// resume it. With Config.Offsets (the group's offsets in Kafka), the
// member that leads commits the safe offsets there every CommitInterval.
package coord
