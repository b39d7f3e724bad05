// Package admin administers a keyshare group from outside its members: it
// plans and applies offset resets and deletes a group's state, in etcd and
// in Kafka together. Deletes are refused while the group has live members
// (keys under members/), and resets while it has live members and is not
// paused; the etcd side of a change is one transaction per batch guarded by
// that condition (for a reset of a paused group: the pause, and every range
// it rewrites being as read), so a change fails rather than run beside a
// member that could overwrite it.
//
//	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": "localhost:9092"}, "/keyshare", "orders")
//	defer g.Close()
//	plan, err := g.PlanReset(ctx, []admin.Selector{{Topic: "orders", Partition: -1}}, admin.Reset{To: admin.ToEarliest})
//	err = g.ApplyReset(ctx, plan)
//
// Pause and Resume hold a running group without stopping its members (they
// keep their ranges, finish and flush what is in flight, take nothing new;
// a reset applied meanwhile replaces their ranges' state);
// Delete removes a group's etcd state (and optionally its Kafka offsets)
// once no member runs. List finds the groups under a prefix and StateOf
// names a group's state (Stable, Rebalancing, Empty, Paused) from its etcd
// state. A reset's target outside the log is clamped to it, as
// kafka-consumer-groups clamps. DescribeKey reports, read only, what the
// group knows of one key: its partition (given, or computed with a
// producer's Partitioner), its key hash, the range and member that own it,
// the offsets of its records the range's ledger has not seen handled (read
// from Kafka from the range's watermark, bounded) and the stuck report
// naming it. SkipKey, ParkKey, UnparkKey and ReplayKey act on one key for
// the whole group, stored under keyops/ and applied by whichever member
// owns the key, now or after its range moves (docs/operations.md,
// "Operating on one key"); CancelKeyOp removes such an operation and
// KeyOps lists them. cmd/keyshare's "group" and "key" subcommands are thin
// layers over this package.
package admin
