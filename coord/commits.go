package coord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/schema"
)

// minRoundBudget is the least time a commit round may take before it is
// cut short: an interval shorter than a loaded machine's round trip would
// otherwise never finish a round.
const minRoundBudget = 500 * time.Millisecond

// PartitionOffsets is one partition as the leader saw it in a round.
type PartitionOffsets struct {
	End       int64 // log end offset; -1 if not known
	Safe      int64 // safe watermark from the ledger
	Committed int64 // Kafka's committed offset as last read or committed; -1 if none
}

// CommitRound is what one commit round did.
type CommitRound struct {
	Partitions map[assign.TopicPartition]PartitionOffsets
	Recorded   int // commit records written to etcd
	Conflicts  int // commit records whose key changed since read (retried next round)
	Committed  int // partitions committed to Kafka
	Repairs    int // of those, repairs: Kafka held another offset than etcd's record, so etcd's was committed again
	Failed     int // partitions Kafka refused
	Took       time.Duration
}

// commitWrite is one partition's commit record to write: Offset, if the
// commit key's ModRevision is still PrevRev (0: the key must not exist).
type commitWrite struct {
	assign.TopicPartition
	PrevRev int64
	Offset  int64
}

// recordCommits stores many partitions' committed offsets in
// ⌈len(writes) ÷ (MaxTxnOps−1)⌉ transactions, up to four at once, each
// guarded by leadership and by each commit key's ModRevision (so a stored
// offset never goes backwards). A write whose key changed since the caller
// read it is a conflict: it is left out, the others in its transaction are
// written, and the caller retries it with a fresh read. It returns the
// revision each written partition was stored at, and ErrNotLeader once this
// member no longer leads; when ctx ends first, what was written so far.
func (l *leader) recordCommits(ctx context.Context, writes []commitWrite) (written map[assign.TopicPartition]int64, conflicts []assign.TopicPartition, err error) {
	per := max(1, l.s.cfg.MaxTxnOps-1)
	written = make(map[assign.TopicPartition]int64, len(writes))
	var batches [][]commitWrite
	for len(writes) > 0 {
		batch := writes[:min(per, len(writes))]
		writes = writes[len(batch):]
		batches = append(batches, batch)
	}
	var mu sync.Mutex
	eachInFlight(batches, nil, func(_ int, batch []commitWrite) {
		rev, wrote, lost, berr := l.recordCommitBatch(ctx, batch)
		mu.Lock()
		defer mu.Unlock()
		for _, w := range wrote {
			written[w.TopicPartition] = rev
		}
		conflicts = append(conflicts, lost...)
		if berr != nil && (err == nil || errors.Is(berr, ErrNotLeader)) {
			err = berr
		}
	})
	return written, conflicts, err
}

// recordCommitBatch writes one transaction's worth of commit records,
// leaving out those whose key changed since read (the conflicts) until the
// rest is written. Each failed attempt removes at least one conflict, so
// this ends; in practice it takes one or two.
func (l *leader) recordCommitBatch(ctx context.Context, batch []commitWrite) (rev int64, wrote []commitWrite, conflicts []assign.TopicPartition, err error) {
	for len(batch) > 0 {
		cmps := []clientv3.Cmp{l.guard()}
		then := make([]clientv3.Op, 0, len(batch))
		els := []clientv3.Op{clientv3.OpGet(l.key, clientv3.WithKeysOnly())}
		for _, w := range batch {
			key := l.s.schema.Commit(w.Topic, w.Partition)
			rec := schema.CommitRecord{V: recordVersion, Offset: w.Offset, Leader: l.s.ID(), At: time.Now().UTC()}
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", w.PrevRev))
			then = append(then, clientv3.OpPut(key, mustJSON(rec)))
			els = append(els, clientv3.OpGet(key, clientv3.WithKeysOnly()))
		}
		resp, err := l.s.cli.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
		if err != nil {
			return 0, nil, conflicts, fmt.Errorf("coord: record commits of %d partitions: %w", len(batch), err)
		}
		if resp.Succeeded {
			return resp.Header.Revision, batch, conflicts, nil
		}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 0 || kvs[0].CreateRevision != l.rev {
			return 0, nil, conflicts, fmt.Errorf("coord: record commits: %w", ErrNotLeader)
		}
		keep := batch[:0:0]
		for i, w := range batch {
			cur := int64(0)
			if kvs := resp.Responses[i+1].GetResponseRange().Kvs; len(kvs) > 0 {
				cur = kvs[0].ModRevision
			}
			if cur != w.PrevRev {
				conflicts = append(conflicts, w.TopicPartition)
			} else {
				keep = append(keep, w)
			}
		}
		if len(keep) == len(batch) {
			// No compare explains the failure: leave the batch to the
			// next round rather than loop.
			return 0, nil, append(conflicts, tpsOf(batch)...), nil
		}
		batch = keep
	}
	return 0, nil, conflicts, nil
}

func tpsOf(ws []commitWrite) []assign.TopicPartition {
	out := make([]assign.TopicPartition, len(ws))
	for i, w := range ws {
		out[i] = w.TopicPartition
	}
	return out
}

// runCommits runs the leader's commit rounds on Config.Offsets until ctx
// ends (leadership ends with it): every CommitInterval, each partition's
// safe watermark is recorded in etcd under the leader's guard (so a
// deposed leader cannot record, and a new leader starts from it), then
// committed to Kafka. The recorded offset never goes backwards (only an
// operator's reset lowers it), and Kafka is made to hold it.
//
// A round costs a fixed number of round trips whatever the number of
// partitions: the group's state from the leader's cache, one read of
// Kafka's committed offsets, ⌈moved ÷ (MaxTxnOps−1)⌉ etcd transactions, one
// Kafka commit and one end-offset lookup (Offsets may send a read or a
// commit as several requests at once); a round that finds an offset to
// repair reads etcd's revision once more (repair.go).
//
// Others can commit to Kafka: a deposed leader (Kafka knows nothing of
// etcd's guard) whose commit lands late, below what this leader committed
// since or, after an operator's reset, above it; an operator using Kafka's
// own tools. So every round rereads what Kafka holds and, wherever keyshare
// has recorded a commit for the partition and Kafka holds another offset,
// commits etcd's again (a repair) and says which writer it most likely
// was. Only where keyshare has never recorded a commit is Kafka's offset a
// floor: a group migrating from a plain consumer group starts there.
func (l *leader) runCommits(ctx context.Context) {
	cfg := l.s.cfg
	cm := newCommitter(l)
	t := time.NewTicker(cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r, err := cm.round(ctx)
		if err != nil {
			if ctx.Err() == nil {
				cm.log.Warn("commit round", "error", err)
			}
			if errors.Is(err, ErrNotLeader) {
				return
			}
			continue
		}
		if cfg.OnCommitRound != nil {
			cfg.OnCommitRound(r)
		}
	}
}

// committer runs the commit rounds: the I/O around the decisions of
// commitplan.go, whose memory it keeps between rounds.
type committer struct {
	l        *leader
	offsets  Offsets
	interval time.Duration
	log      hclog.Logger
	mem      *commitMemory
}

func newCommitter(l *leader) *committer {
	return &committer{l: l, offsets: l.s.cfg.Offsets, interval: l.s.cfg.CommitInterval, log: l.s.log.Named("commit"), mem: newCommitMemory()}
}

// round is one commit round, cut short at max(CommitInterval,
// minRoundBudget).
// What does not finish is done again next round.
func (c *committer) round(ctx context.Context) (CommitRound, error) {
	start := time.Now()
	budget := max(c.interval, minRoundBudget)
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	out := CommitRound{Partitions: make(map[assign.TopicPartition]PartitionOffsets)}
	snap, err := c.l.cache.snapshot(ctx)
	if err != nil {
		return out, fmt.Errorf("read group state: %w", err)
	}
	marks := snap.Watermarks()
	parts := commitParts(marks)
	if len(parts) == 0 {
		return out, nil
	}
	got, err := c.offsets.Committed(ctx, parts)
	if err != nil {
		c.log.Warn("read Kafka's committed offsets; using the last known", "partitions", len(parts), "error", err)
	}
	ends, err := c.offsets.Ends(ctx, parts)
	if err != nil {
		c.log.Debug("read end offsets", "error", err)
	}
	p := c.mem.plan(commitInput{snap: snap, marks: marks, kafka: got, ends: ends})
	for _, d := range p.damaged {
		c.log.Error("damaged commit record: its offset is above the partition's log end; not committing it to Kafka, writing the ledger's safe watermark in its place",
			"topic", d.tp.Topic, "partition", d.tp.Partition, "recorded", d.recorded, "log_end", d.end, "safe", d.safe)
	}

	if len(p.writes) > 0 {
		// Recording stops at three quarters of the budget, so that what
		// it recorded reaches Kafka this round: at P = 4,096 during a
		// handoff, recording 1,795 partitions once took the whole round
		// and none was committed to Kafka until the next.
		rctx, rcancel := context.WithDeadline(ctx, start.Add(budget*3/4))
		revs, conflicts, err := c.l.recordCommits(rctx, p.writes)
		rcancel()
		out.Recorded = p.recorded(revs)
		if errors.Is(err, ErrNotLeader) {
			return out, err
		}
		if err != nil {
			c.log.Warn("record commits in etcd; those not recorded are not committed to Kafka this round", "partitions", len(p.writes), "recorded", out.Recorded, "error", err)
		}
		if len(conflicts) > 0 {
			out.Conflicts = len(conflicts)
			c.log.Debug("commit keys changed since read; retrying them next round", "partitions", len(conflicts), "which", joinTPs(conflicts))
		}
	}

	k := p.toKafka()
	if len(k.repairs) > 0 {
		c.confirmRepairs(ctx, p, k)
	}
	if len(k.commit) > 0 {
		failed, err := c.offsets.Commit(ctx, k.commit)
		if err != nil {
			out.Failed = len(k.commit)
			c.log.Warn("commit to Kafka; etcd holds the offsets, the next round commits them again", "partitions", len(k.commit), "error", err)
		} else {
			r := p.committed(k, failed)
			out.Committed, out.Failed, out.Repairs = r.committed, r.failed, len(r.repaired)
			for _, rs := range r.resets {
				c.log.Info("committed an operator's offset reset to Kafka", "topic", rs.tp.Topic, "partition", rs.tp.Partition, "offset", rs.offset, "reset_epoch", rs.epoch)
			}
			c.explain(r.repaired)
			if r.failed > 0 {
				c.log.Warn("Kafka refused some commits; etcd holds them, the next round commits them again", "partitions", r.failed, "first", r.firstBad)
			}
			c.log.Debug("committed", "partitions", r.committed)
		}
	}
	out.Partitions = p.partitions()
	out.Took = time.Since(start)
	return out, nil
}

// joinTPs describes partitions for a log line: the first few and a count.
func joinTPs(tps []assign.TopicPartition) string {
	return textsafe.FirstFew(tps, ", ", func(tp assign.TopicPartition) string { return fmt.Sprintf("%s/%d", tp.Topic, tp.Partition) })
}
