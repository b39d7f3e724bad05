package admin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/consumer/kafkaoffsets"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
)

// Group administers one keyshare group.
type Group struct {
	cli   *clientv3.Client
	group schema.Group
	name  string
	kcfg  kafka.ConfigMap
	kc    *kafka.Consumer // never subscribes: metadata, offsets, commits
}

// Open returns an administrator of group under prefix. kafkaCfg holds the
// librdkafka settings (bootstrap.servers and the security properties); it
// may be nil when only etcd state is touched (Delete without Kafka
// offsets).
func Open(cli *clientv3.Client, kafkaCfg kafka.ConfigMap, prefix, group string) (*Group, error) {
	if err := coord.CheckName("group", group); err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	g := &Group{cli: cli, group: schema.Group{Prefix: prefix, Name: group}, name: group, kcfg: kafkaCfg}
	if kafkaCfg != nil {
		cm := kafka.ConfigMap{}
		for k, v := range kafkaCfg {
			cm[k] = v
		}
		cm["group.id"] = group
		cm["enable.auto.commit"] = false
		if _, ok := cm["log_level"]; !ok {
			cm["log_level"] = 3
		}
		kc, err := kafka.NewConsumer(&cm)
		if err != nil {
			return nil, fmt.Errorf("admin: Kafka client: %w", err)
		}
		g.kc = kc
	}
	return g, nil
}

// Close releases the Kafka client.
func (g *Group) Close() {
	if g.kc != nil {
		g.kc.Close()
		g.kc = nil
	}
}

// Root is the group's etcd prefix.
func (g *Group) Root() string { return g.group.Root() }

// LiveMembers lists the ids of the group's live members.
func (g *Group) LiveMembers(ctx context.Context) ([]string, error) {
	ids, err := coord.LiveMembers(ctx, g.cli, g.group)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	return ids, nil
}

// known refuses when nothing is stored for the group, and when its root is
// not one group's alone (coord.CheckRoot): a prefix/group pair nested in
// another group's tree would otherwise let a delete or a reset reach that
// group's keys, past its live-member check.
func (g *Group) known(ctx context.Context) error {
	n, err := coord.CountKeys(ctx, g.cli, g.group)
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("%w %q: nothing under %s (check --group and --prefix)", ErrUnknownGroup, g.name, g.group.Root())
	}
	if err := coord.CheckRoot(ctx, g.cli, g.group); err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	return nil
}

// check refuses when the group is unknown or has live members.
func (g *Group) check(ctx context.Context) error {
	if err := g.known(ctx); err != nil {
		return err
	}
	ids, err := g.LiveMembers(ctx)
	if err != nil {
		return err
	}
	if len(ids) > 0 {
		return liveMembersError{g.name, ids, "(stop them first; a member killed without leaving is gone once its lease expires); nothing was changed"}
	}
	return nil
}

// checkReset refuses a reset when the group is unknown, or has live members
// and is not paused. It returns the guard the reset's writes must carry:
// the pause as read, when the group is paused (members may run, holding
// their ranges but taking no records), else "no member registered".
func (g *Group) checkReset(ctx context.Context) (coord.ResetGuard, error) {
	if err := g.known(ctx); err != nil {
		return coord.ResetGuard{}, err
	}
	pause, _, err := coord.ReadPause(ctx, g.cli, g.group)
	if err != nil {
		return coord.ResetGuard{}, fmt.Errorf("admin: %w", err)
	}
	if pause.Paused {
		return coord.ResetGuard{PausedRev: pause.Rev}, nil
	}
	ids, err := g.LiveMembers(ctx)
	if err != nil {
		return coord.ResetGuard{}, err
	}
	if len(ids) > 0 {
		return coord.ResetGuard{}, liveMembersError{g.name, ids,
			fmt.Sprintf("and is not paused (pause it first: keyshare group pause --group %s, or stop them); nothing was changed", g.name)}
	}
	return coord.ResetGuard{}, nil
}

// Pause asks every member of the group to stop taking records: each keeps
// its ranges and session, finishes and flushes what is in flight, and the
// leader goes on committing, so the committed offset settles. The pause is
// stored in etcd without a lease: it outlives member restarts until Resume.
// by names who paused it (shown by status); reason is free text.
func (g *Group) Pause(ctx context.Context, by, reason string) error {
	if err := g.known(ctx); err != nil {
		return err
	}
	return coord.WritePause(ctx, g.cli, g.group, schema.PauseRecord{By: by, Reason: reason})
}

// Resume lets the members take records again; it reports whether the group
// was paused.
func (g *Group) Resume(ctx context.Context) (bool, error) {
	if err := g.known(ctx); err != nil {
		return false, err
	}
	return coord.DeletePause(ctx, g.cli, g.group)
}

// Delete removes the group's etcd state and, with kafkaOffsets, its
// committed offsets in Kafka (DeleteConsumerGroups). It is refused while
// the group has live members.
func (g *Group) Delete(ctx context.Context, kafkaOffsets bool) error {
	if kafkaOffsets && g.kcfg == nil {
		return errors.New("admin: deleting Kafka offsets needs the Kafka settings")
	}
	if err := g.check(ctx); err != nil {
		return err
	}
	if err := coord.DeleteGroup(ctx, g.cli, g.group); errors.Is(err, coord.ErrGroupChanged) {
		return liveMembersError{g.name, []string{"one that joined during the delete"}, "(stop it first); nothing was changed"}
	} else if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	if !kafkaOffsets {
		return nil
	}
	a, err := kafka.NewAdminClientFromConsumer(g.kc)
	if err != nil {
		return fmt.Errorf("admin: Kafka admin client: %w", err)
	}
	defer a.Close()
	res, err := a.DeleteConsumerGroups(ctx, []string{g.name})
	if err == nil {
		for _, r := range res.ConsumerGroupResults {
			if r.Error.Code() != kafka.ErrNoError && r.Error.Code() != kafka.ErrGroupIDNotFound {
				err = r.Error
			}
		}
	}
	if err != nil {
		return fmt.Errorf("admin: etcd state of %q deleted, but not its Kafka offsets: %w (retry with Kafka tools or kafka-consumer-groups --delete)", g.name, err)
	}
	return nil
}

const kafkaTimeoutMs = 10000

// PlanReset computes the new offset of each selected partition (for
// ToOffsets: of each partition in r.Offsets; sel is then ignored); it
// changes nothing. A target outside the log is clamped to its bounds, as
// kafka-consumer-groups does, and the row's Note says so. It is refused
// for an unknown group or topic, a partition the topic does not have, a
// time in the future, and while the group has live members and is not
// paused.
func (g *Group) PlanReset(ctx context.Context, sel []Selector, r Reset) ([]PlanRow, error) {
	if g.kc == nil {
		return nil, errors.New("admin: a reset needs the Kafka settings")
	}
	if _, err := g.checkReset(ctx); err != nil {
		return nil, err
	}
	if r.To == ToDatetime && r.Time.After(time.Now()) {
		return nil, fmt.Errorf("%w: --to-datetime %s is in the future", ErrBadReset, r.Time.Format(time.RFC3339))
	}
	asked := make(map[assign.TopicPartition]int64)
	if r.To == ToOffsets {
		sel = nil
		for _, o := range r.Offsets {
			sel = append(sel, Selector{Topic: o.Topic, Partition: o.Partition})
			asked[assign.TopicPartition{Topic: o.Topic, Partition: o.Partition}] = o.Offset
		}
	}
	tps, err := g.selectedPartitions(sel)
	if err != nil {
		return nil, err
	}
	parts := make([]assign.TopicPartition, len(tps))
	for i, tp := range tps {
		parts[i] = assign.TopicPartition{Topic: *tp.Topic, Partition: tp.Partition}
	}
	committed, starts, ends, err := g.offsetsOf(ctx, parts)
	if err != nil {
		return nil, err
	}
	var times []kafka.TopicPartition
	if r.To == ToDatetime {
		if times, err = g.offsetsAtTime(tps, r.Time); err != nil {
			return nil, err
		}
	}
	plan := make([]PlanRow, 0, len(tps))
	for i, p := range parts {
		lo, okLo := starts[p]
		hi, okHi := ends[p]
		if !okLo || !okHi {
			return nil, fmt.Errorf("admin: log bounds of %s/%d: no answer from the broker; try again", p.Topic, p.Partition)
		}
		row := PlanRow{Topic: p.Topic, Partition: p.Partition, Current: -1, LogStart: lo, LogEnd: hi}
		if c, ok := committed[p]; ok && c >= 0 {
			row.Current = c
		}
		if r.To == ToDatetime {
			asked[p] = int64(times[i].Offset)
		}
		row, err := target(r, row, asked[p])
		if err != nil {
			return nil, err
		}
		plan = append(plan, row)
	}
	sort.Slice(plan, func(i, j int) bool {
		if plan[i].Topic != plan[j].Topic {
			return plan[i].Topic < plan[j].Topic
		}
		return plan[i].Partition < plan[j].Partition
	})
	return plan, nil
}

// resetAttempts bounds how often ApplyReset reads the group again when
// its state changed under the reset (a paused member's last flush, a
// leader's round).
const resetAttempts = 5

// resetWriter names an operator's reset in its commit records and in the
// metadata of its Kafka commits.
const resetWriter = "keyshare group reset-offsets"

// ApplyReset writes plan: in etcd, each partition's commit record, a fresh
// ledger entry (next = the new offset) for every range of the partition
// and its range record with a grown reset epoch, so that the next member,
// or a paused member that owns the range, starts there; then the group's
// committed offsets in Kafka. The etcd writes are one transaction per
// batch of partitions, guarded by the pause (or, with no pause, by "no
// live members") and by every range record and ledger entry being as
// read; a batch whose ranges changed meanwhile is read and written again.
// Kafka's commit follows. If it fails, etcd already holds the reset:
// apply the same plan again.
//
// A paused member's flushes of the state it held before are fenced (its
// writes are guarded by the range record's revision), and on the grown
// epoch it drops that state, cancels what it still runs of the range, and
// fetches from the new offset once the group is resumed.
func (g *Group) ApplyReset(ctx context.Context, plan []PlanRow) error {
	resets := make([]coord.OffsetReset, 0, len(plan))
	for _, row := range plan {
		resets = append(resets, coord.OffsetReset{TopicPartition: assign.TopicPartition{Topic: row.Topic, Partition: row.Partition}, Offset: row.New})
	}
	var err error
	for range resetAttempts {
		var rg coord.ResetGuard
		if rg, err = g.checkReset(ctx); err != nil {
			return err
		}
		var snap *schema.Snapshot
		if snap, err = coord.ReadSnapshot(ctx, g.cli, g.group); err != nil {
			return fmt.Errorf("admin: %w", err)
		}
		err = coord.ResetOffsets(ctx, g.cli, g.group, snap, resets, rg, resetWriter, time.Now().UTC())
		if !errors.Is(err, coord.ErrGroupChanged) {
			break
		}
	}
	if errors.Is(err, coord.ErrGroupChanged) {
		return fmt.Errorf("admin: group %q changed under the reset %d times (a member joined, the pause was lifted, or its ranges kept moving): %w; some partitions may be reset already: check keyshare group describe, pause the group (or stop its members) and run the reset again",
			g.name, resetAttempts, err)
	}
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	var tps []kafka.TopicPartition
	for _, row := range plan {
		topic := row.Topic
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: row.Partition, Offset: kafka.Offset(row.New)})
	}
	// Marked as keyshare's: a leader that finds a commit of this reset
	// not yet recorded in its view knows it for keyshare's, not an
	// outside tool's.
	kafkaoffsets.SetMetadata(tps, coord.CommitMark(resetWriter))
	a, err := kafka.NewAdminClientFromConsumer(g.kc)
	if err != nil {
		return fmt.Errorf("admin: Kafka admin client: %w", err)
	}
	defer a.Close()
	res, err := a.AlterConsumerGroupOffsets(ctx, []kafka.ConsumerGroupTopicPartitions{{Group: g.name, Partitions: tps}})
	if err == nil {
		for _, gr := range res.ConsumerGroupsTopicPartitions {
			for _, tp := range gr.Partitions {
				if tp.Error != nil && err == nil {
					err = fmt.Errorf("%s/%d: %w", *tp.Topic, tp.Partition, tp.Error)
				}
			}
		}
	}
	if err != nil {
		return fmt.Errorf("admin: etcd holds the reset of %q but Kafka's committed offsets were not changed: %w; apply the reset again", g.name, err)
	}
	return nil
}
