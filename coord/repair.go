package coord

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/assign"
)

// Repairs: a commit round that finds in Kafka another offset than the one
// etcd records commits etcd's again (commits.go). Kafka knows nothing of
// etcd's guard, so three kinds of writer can leave another offset there:
// a deposed keyshare leader whose commit lands late, below the record or,
// after an operator's reset, above it; an operator using Kafka's own tool
// (kafka-consumer-groups --reset-offsets, accepted because keyshare's
// group has no Kafka members); and a plain consumer using the group id.
// The offset's metadata (CommitMark) tells keyshare's commits from the
// others, so the warning can say which it was and what to do.

// confirmRepairs keeps in commit only the repairs that etcd's current
// state confirms. A keyshare writer records in etcd before it commits to
// Kafka, so an offset read from Kafka may be the commit of a record this
// round's snapshot has not seen yet (keyshare group reset-offsets just
// ran): "repairing" it would put the older offset back. So once per round
// with repairs, the cache is brought to etcd's current revision (one
// read), and a partition whose record changed since the snapshot is left
// to the next round.
func (c *committer) confirmRepairs(ctx context.Context, p *commitPlan, k kafkaCommits) {
	resp, err := c.l.s.cli.Get(ctx, c.l.key, clientv3.WithKeysOnly())
	if err != nil {
		c.log.Debug("read etcd's revision before repairing Kafka's offsets; trying next round", "error", err)
		k.dropRepairs()
		return
	}
	if !c.l.cache.waitRev(ctx, resp.Header.Revision) {
		k.dropRepairs()
		return
	}
	fresh, err := c.l.cache.snapshot(ctx)
	if err != nil {
		k.dropRepairs()
		return
	}
	p.unconfirmed(k, fresh)
}

// repair is one partition whose Kafka offset a round committed over.
type repair struct {
	tp   assign.TopicPartition
	had  int64  // what Kafka held
	by   string // who committed it (KafkaOffset.By)
	etcd int64  // etcd's record, committed in its place
	// reset is the record's reset epoch (0: no operator ever reset the
	// partition's offset).
	reset int64
}

// maxRepairLines bounds the repair warnings of one round: an operator's
// reset of every partition with Kafka's tool is one event, not thousands
// of lines.
const maxRepairLines = 8

// explain logs, for each repair, what most likely left the offset there
// and what to do about it.
func (c *committer) explain(repaired []repair) {
	for i, r := range repaired {
		if i == maxRepairLines {
			rest := make([]assign.TopicPartition, 0, len(repaired)-i)
			for _, r := range repaired[i:] {
				rest = append(rest, r.tp)
			}
			c.log.Warn("and more partitions whose Kafka offset differed from etcd's record; committed etcd's again", "partitions", len(rest), "which", joinTPs(rest))
			return
		}
		kv := []any{"topic", r.tp.Topic, "partition", r.tp.Partition, "kafka_had", r.had, "etcd", r.etcd}
		switch {
		case r.had < 0:
			c.log.Warn("Kafka held no committed offset for the partition, while etcd records one (deleted, say with kafka-consumer-groups --delete-offsets; expired after the broker's offsets.retention.minutes; or never committed by a leader that stopped between recording in etcd and committing); committed etcd's again", kv...)
		case r.by == "":
			c.log.Warn("the group's committed offset was set outside keyshare: with Kafka's own tool (kafka-consumer-groups --reset-offsets, which Kafka accepts because the group has no Kafka members), or by a plain consumer using the group id. keyshare's offset is the one recorded in etcd (members resume from it), so it committed that again. To move a keyshare group's offsets, pause the group and run keyshare's reset instead",
				append(kv, "instead", c.resetCommand(r))...)
		case r.had > r.etcd && r.reset == 0 && r.by != "":
			// keyshare records in etcd before it commits to Kafka, and
			// only a reset moves a record down: with none, etcd holds
			// less than it once did.
			c.log.Warn("Kafka held an offset above etcd's record, committed by keyshare, and no offset reset explains it: etcd's state is older than Kafka's (etcd restored from a backup, or the record written by hand). keyshare's record wins, so it committed etcd's again: the records between run again, as many as the group handled since the backup (docs/operations.md, \"Restoring etcd\")",
				append(kv, "kafka_committed_by", r.by)...)
		case r.had > r.etcd:
			c.log.Warn("Kafka held an offset above etcd's record, committed by keyshare before an offset reset and landed after it (a deposed leader's commit, or a round that raced the reset); committed etcd's again",
				append(kv, "kafka_committed_by", r.by)...)
		default:
			c.log.Warn("Kafka held an offset below etcd's record, committed by keyshare and landed late (a deposed leader's commit, or a leader that stopped between recording in etcd and committing); committed etcd's again",
				append(kv, "kafka_committed_by", r.by)...)
		}
	}
}

// resetCommand is what an operator who set offset r.had with Kafka's tool
// runs to set it the keyshare way.
func (c *committer) resetCommand(r repair) string {
	group := "--group " + c.l.s.cfg.Group
	if p := c.l.s.cfg.Prefix; p != DefaultConfig().Prefix {
		group += " --prefix " + p
	}
	return fmt.Sprintf("keyshare group pause %[1]s; keyshare group reset-offsets %[1]s --topic %[2]s:%[3]d --to-offset %[4]d --execute; keyshare group resume %[1]s", group, r.tp.Topic, r.tp.Partition, r.had)
}
