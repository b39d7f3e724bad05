package coord

import (
	"fmt"
	"maps"
	"slices"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/schema"
)

// The commit protocol's decisions, apart from its I/O (commits.go does
// that): from the group's state, Kafka's committed offsets and the log
// ends to the commit records to write in etcd, then to the offsets to
// commit to Kafka and which of them are repairs (repair.go). No I/O, so
// every rule is tested on values (commitplan_internal_test.go).

// commitMemory is what the commit protocol keeps between rounds.
type commitMemory struct {
	// kafkaAt is what Kafka holds, as last read or committed; kafkaBy
	// who committed it, as last read (KafkaOffset.By; "" once this
	// leader has committed over it).
	kafkaAt map[assign.TopicPartition]int64
	kafkaBy map[assign.TopicPartition]string
	// wrote is what this leader recorded, ahead of a cache that may not
	// have seen it yet.
	wrote map[assign.TopicPartition]written
	// resets is, per partition, the operator's reset epoch
	// (CommitRecord.Reset) whose offset this leader has committed.
	resets map[assign.TopicPartition]int64
	// ends is each partition's log end as last learned (Offsets.Ends).
	ends map[assign.TopicPartition]int64
	// damaged is, per partition, the commit record's offset this leader
	// last reported as past the log end (reported once).
	damaged map[assign.TopicPartition]int64
}

type written struct{ rev, offset int64 }

func newCommitMemory() *commitMemory {
	return &commitMemory{kafkaAt: make(map[assign.TopicPartition]int64), kafkaBy: make(map[assign.TopicPartition]string), wrote: make(map[assign.TopicPartition]written), resets: make(map[assign.TopicPartition]int64),
		ends: make(map[assign.TopicPartition]int64), damaged: make(map[assign.TopicPartition]int64)}
}

// commitParts is the partitions a round looks at, sorted: those with a
// safe watermark.
func commitParts(marks map[assign.TopicPartition]int64) []assign.TopicPartition {
	parts := make([]assign.TopicPartition, 0, len(marks))
	for tp := range marks {
		parts = append(parts, tp)
	}
	slices.SortFunc(parts, assign.CompareTP)
	return parts
}

// commitInput is what a round learned: etcd's side from the leader's
// cache, Kafka's from Offsets (either answer may leave partitions out).
type commitInput struct {
	snap  *schema.Snapshot                      // Rev, Commits, CommitRevs
	marks map[assign.TopicPartition]int64       // snap.Watermarks()
	kafka map[assign.TopicPartition]KafkaOffset // Offsets.Committed's answer
	ends  map[assign.TopicPartition]int64       // Offsets.Ends' answer
}

// damagedRecord is a commit record found past the log end, to report.
type damagedRecord struct {
	tp            assign.TopicPartition
	recorded, end int64
	safe          int64
}

// commitPlan is one round's decisions, made in two steps around the etcd
// write: plan decides the records to write, toKafka (after recorded) what
// to commit to Kafka, and committed takes Kafka's answer.
type commitPlan struct {
	m     *commitMemory
	in    commitInput
	parts []assign.TopicPartition
	// before is what Kafka held as this leader knew it before this
	// round's read; prior is etcd's record before this round's writes,
	// where keyshare has recorded one.
	before map[assign.TopicPartition]int64
	prior  map[assign.TopicPartition]int64

	writes  []commitWrite   // commit records to write in etcd
	damaged []damagedRecord // records newly found past the log end
}

// plan takes a round's reads into memory and decides the commit records
// to write: each partition's safe watermark where it is above the floor.
func (m *commitMemory) plan(in commitInput) *commitPlan {
	p := &commitPlan{m: m, in: in, parts: commitParts(in.marks), before: maps.Clone(m.kafkaAt), prior: make(map[assign.TopicPartition]int64)}
	for tp, o := range in.kafka {
		m.kafkaAt[tp], m.kafkaBy[tp] = max(o.Offset, -1), o.By
	}
	// A write the cache has caught up with is the cache's to tell: it may
	// since have been deleted (a topic reset) or replaced.
	for tp, w := range m.wrote {
		if w.rev <= in.snap.Rev {
			delete(m.wrote, tp)
		}
	}
	maps.Copy(m.ends, in.ends)

	// Where keyshare has recorded a commit, etcd's record is the floor;
	// Kafka's offset is one only where it never has (a group moving from a
	// plain consumer group).
	marks := in.marks
	for _, tp := range p.parts {
		held, read := m.kafkaAt[tp]
		if !read {
			continue // Kafka's offset unknown: committing could move it back
		}
		rec, rev, has := p.recordedAt(tp)
		if has && p.isDamaged(tp, rec) {
			if m.damaged[tp] != rec {
				m.damaged[tp] = rec
				p.damaged = append(p.damaged, damagedRecord{tp: tp, recorded: rec, end: m.ends[tp], safe: marks[tp]})
			}
			if !p.pastEnd(tp, marks[tp]) {
				p.writes = append(p.writes, commitWrite{TopicPartition: tp, PrevRev: rev, Offset: marks[tp]})
			}
			continue
		}
		floor := held
		if has {
			floor, p.prior[tp] = rec, rec
		}
		if marks[tp] > floor {
			p.writes = append(p.writes, commitWrite{TopicPartition: tp, PrevRev: rev, Offset: marks[tp]})
		}
	}
	return p
}

// recordedAt is the offset etcd holds for a partition: the cache's, or
// this leader's own write if the cache has not seen it yet.
func (p *commitPlan) recordedAt(tp assign.TopicPartition) (offset, rev int64, ok bool) {
	if w, mine := p.m.wrote[tp]; mine {
		return w.offset, w.rev, true
	}
	rec, has := p.in.snap.Commits[tp]
	return rec.Offset, p.in.snap.CommitRevs[tp], has
}

// pastEnd reports an offset above the partition's log end as last
// learned.
func (p *commitPlan) pastEnd(tp assign.TopicPartition, o int64) bool {
	end, known := p.m.ends[tp]
	return known && o > end
}

// isDamaged reports a commit record past the end and past the ledger's
// safe watermark (which every record is written from): written by hand or
// by a tool, as no member can have handled a record that does not exist.
// It is never committed to Kafka, where it would stay, as nothing commits
// past it; the ledger's watermark replaces it. Both conditions, because
// the end as last learned may be a cached one, behind a record a member
// has just fetched.
func (p *commitPlan) isDamaged(tp assign.TopicPartition, rec int64) bool {
	return rec > p.in.marks[tp] && p.pastEnd(tp, rec)
}

// recorded notes the commit records etcd stored (recordCommits' answer)
// and returns how many.
func (p *commitPlan) recorded(revs map[assign.TopicPartition]int64) int {
	n := 0
	for _, w := range p.writes {
		if rev, ok := revs[w.TopicPartition]; ok {
			p.m.wrote[w.TopicPartition] = written{rev: rev, offset: w.Offset}
			n++
		}
	}
	return n
}

// kafkaCommits is what a round commits to Kafka.
type kafkaCommits struct {
	commit  map[assign.TopicPartition]int64 // the offsets to commit
	resets  map[assign.TopicPartition]int64 // of those, an operator's reset: its epoch
	repairs map[assign.TopicPartition]int64 // of those, repairs: what Kafka held, changed behind this leader's back
}

// toKafka decides the offsets to commit. The offset to hold in Kafka is
// what etcd now holds (this round's record, or an earlier one whose Kafka
// commit was lost), wherever Kafka holds something else: below it (a late
// commit, or one lost) or above it (an operator's reset not yet in Kafka,
// a commit from before a reset that landed after it, an offset set with
// Kafka's own tools). keyshare's record wins: members resume from it, and
// a higher offset left in Kafka would make a plain consumer, or this group
// after losing its etcd state, skip the records between.
func (p *commitPlan) toKafka() kafkaCommits {
	m, snap := p.m, p.in.snap
	k := kafkaCommits{commit: make(map[assign.TopicPartition]int64), resets: make(map[assign.TopicPartition]int64), repairs: make(map[assign.TopicPartition]int64)}
	for _, tp := range p.parts {
		held, read := m.kafkaAt[tp]
		if !read {
			continue
		}
		rec, rev, has := p.recordedAt(tp)
		if !has || p.isDamaged(tp, rec) {
			continue
		}
		cached := snap.Commits[tp]
		newReset := rev == snap.CommitRevs[tp] && cached.Reset > m.resets[tp]
		if rec == held {
			if newReset {
				m.resets[tp] = cached.Reset
			}
			continue
		}
		k.commit[tp] = rec
		last, knew := p.before[tp]
		was, wasRecorded := p.prior[tp]
		switch {
		case newReset:
			k.resets[tp] = cached.Reset
		case held > rec,
			// Below what etcd held before this round, and below what
			// this leader last knew Kafka to hold (or it never knew: a
			// takeover).
			wasRecorded && held < was && (!knew || held < last),
			// Changed since this leader's last read by a commit
			// without keyshare's mark.
			knew && held != last && m.kafkaBy[tp] == "":
			k.repairs[tp] = held
		}
	}
	return k
}

// unconfirmed leaves out of k the repairs whose record etcd's fresh state
// no longer holds at the revision this round read: a keyshare writer
// records in etcd before it commits to Kafka, so the offset read from
// Kafka may be the commit of a record this round's snapshot had not seen.
func (p *commitPlan) unconfirmed(k kafkaCommits, fresh *schema.Snapshot) {
	for tp := range k.repairs {
		if _, rev, _ := p.recordedAt(tp); fresh.CommitRevs[tp] != rev {
			delete(k.commit, tp)
			delete(k.repairs, tp)
		}
	}
}

// dropRepairs leaves every repair out of k, to the next round.
func (k kafkaCommits) dropRepairs() {
	for tp := range k.repairs {
		delete(k.commit, tp)
		delete(k.repairs, tp)
	}
}

// kafkaOutcome is what a commit to Kafka did.
type kafkaOutcome struct {
	committed, failed int
	firstBad          string           // the first refusal, for the log
	repaired          []repair         // the repairs Kafka took
	resets            []committedReset // the operators' resets Kafka took
}

type committedReset struct {
	tp            assign.TopicPartition
	offset, epoch int64
}

// committed takes Kafka's answer to k's commit: the partitions it refused
// (failed) keep what Kafka held; the others hold what was committed.
func (p *commitPlan) committed(k kafkaCommits, failed map[assign.TopicPartition]error) kafkaOutcome {
	m := p.m
	var out kafkaOutcome
	for _, tp := range slices.SortedFunc(maps.Keys(k.commit), assign.CompareTP) {
		o := k.commit[tp]
		if e, bad := failed[tp]; bad {
			out.failed++
			if out.firstBad == "" {
				out.firstBad = fmt.Sprintf("%s/%d: %v", tp.Topic, tp.Partition, e)
			}
			continue
		}
		m.kafkaAt[tp] = o
		out.committed++
		if e, ok := k.resets[tp]; ok {
			m.resets[tp] = e
			out.resets = append(out.resets, committedReset{tp: tp, offset: o, epoch: e})
		}
		if had, ok := k.repairs[tp]; ok {
			out.repaired = append(out.repaired, repair{tp: tp, had: had, by: m.kafkaBy[tp], etcd: o, reset: p.in.snap.Commits[tp].Reset})
		}
		m.kafkaBy[tp] = ""
	}
	return out
}

// partitions is the round's figures: each partition's end as this round
// read it (-1 if not), safe watermark, and Kafka's offset as now known
// (-1 if never read).
func (p *commitPlan) partitions() map[assign.TopicPartition]PartitionOffsets {
	out := make(map[assign.TopicPartition]PartitionOffsets, len(p.parts))
	for _, tp := range p.parts {
		end, ok := p.in.ends[tp]
		if !ok {
			end = -1
		}
		held, read := p.m.kafkaAt[tp]
		if !read {
			held = -1
		}
		out[tp] = PartitionOffsets{End: end, Safe: p.in.marks[tp], Committed: held}
	}
	return out
}
