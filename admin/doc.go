// Package admin administers a keyshare group from outside its members: it
// plans and applies offset resets and deletes a group's state, in etcd and
// in Kafka together. Every change is refused while the group has live
// members (keys under members/), and the etcd side of a change is one
// transaction per batch guarded by that condition, so a member that joins
// meanwhile makes the change fail rather than run beside it.
//
//	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": "localhost:9092"}, "/keyshare", "orders")
//	defer g.Close()
//	plan, err := g.PlanReset(ctx, []admin.Selector{{Topic: "orders", Partition: -1}}, admin.Reset{To: admin.ToEarliest})
//	err = g.ApplyReset(ctx, plan)
//
// Pause and Resume hold a running group without stopping its members (they
// keep their ranges, finish and flush what is in flight, take nothing new);
// Delete removes a group's etcd state (and optionally its Kafka offsets)
// once no member runs. cmd/keyshare's "group" subcommand is a thin layer
// over this package.
package admin
