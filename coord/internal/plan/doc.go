// Package plan is the leader's planner: from a snapshot of the group
// (package state), the partitions and the layout the assignor wants, it
// computes the changes that move the group there by the two-phase handoff
// (revoke, drain, hand on), filling gaps, repairing damaged keys, merging
// a member's adjacent ranges once the group has been still
// (SettleTracker), holding a gone owner's ranges for the failover grace
// (GoneTracker), and planning where a leaving member's ranges go, so that
// it writes each straight to its next owner.
//
// A Change is plain data: Guards ("this key still at the revision read",
// or "this key absent") and Writes (a put or a delete). The guards are
// the safety argument, and tests assert on them as data
// (TestPlanGuards); coord is the one adapter that turns changes into etcd
// transactions. The package does no I/O and imports no etcd and
// no Kafka client (docs/packagemap_test.go holds it to that).
//
//	changes := plan.Plan(plan.Input{
//		Schema: schema, Snap: snap, Parts: parts, Now: time.Now().UTC(),
//		DrainTimeout: 30 * time.Second, Gen: snap.Generation.Generation + 1,
//		Clock: time.Now(), Seen: seen, Grace: grace,
//	})
//	for _, c := range changes {
//		fmt.Println(c.What, c.Guards, c.Writes)
//	}
package plan
