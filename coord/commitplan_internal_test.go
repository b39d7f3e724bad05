package coord

import (
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/schema"
)

func ctp(p int32) assign.TopicPartition { return assign.TopicPartition{Topic: "t", Partition: p} }

// commitSnap is a snapshot at revision 20 holding commit records: offset
// and revision per partition (reset epoch 0).
func commitSnap(recs map[int32][2]int64) *schema.Snapshot {
	s := &schema.Snapshot{Rev: 20, Commits: make(map[assign.TopicPartition]schema.CommitRecord), CommitRevs: make(map[assign.TopicPartition]int64)}
	for p, r := range recs {
		s.Commits[ctp(p)] = schema.CommitRecord{V: 1, Offset: r[0]}
		s.CommitRevs[ctp(p)] = r[1]
	}
	return s
}

func tpMap(m map[int32]int64) map[assign.TopicPartition]int64 {
	out := make(map[assign.TopicPartition]int64, len(m))
	for p, o := range m {
		out[ctp(p)] = o
	}
	return out
}

func kafkaAt(m map[int32]int64, by string) map[assign.TopicPartition]KafkaOffset {
	out := make(map[assign.TopicPartition]KafkaOffset, len(m))
	for p, o := range m {
		out[ctp(p)] = KafkaOffset{Offset: o, By: by}
	}
	return out
}

// TestCommitPlan: one round's decisions, from the group's state and
// Kafka's offsets to the records written in etcd (each stored at
// revision 21) and the offsets committed to Kafka.
func TestCommitPlan(t *testing.T) {
	cases := []struct {
		name  string
		mem   func(*commitMemory) // what earlier rounds left
		snap  *schema.Snapshot
		marks map[int32]int64
		kafka map[assign.TopicPartition]KafkaOffset
		ends  map[int32]int64

		writes  map[int32]int64 // records written: offset
		damaged []int32         // records reported past the log end
		commit  map[int32]int64
		repairs map[int32]int64 // what Kafka held where a commit repairs it
		resets  map[int32]int64 // reset epochs committed
	}{{
		name:   "a new group commits the safe watermark, not the log end",
		snap:   commitSnap(nil),
		marks:  map[int32]int64{0: 10, 1: 7},
		kafka:  kafkaAt(map[int32]int64{0: -1, 1: -1}, ""),
		ends:   map[int32]int64{0: 100, 1: 100},
		writes: map[int32]int64{0: 10, 1: 7},
		commit: map[int32]int64{0: 10, 1: 7},
	}, {
		name:   "the watermark moved: recorded over the old record and committed",
		snap:   commitSnap(map[int32][2]int64{0: {10, 15}}),
		marks:  map[int32]int64{0: 12},
		kafka:  kafkaAt(map[int32]int64{0: 10}, "leader"),
		mem:    func(m *commitMemory) { m.kafkaAt[ctp(0)] = 10 },
		writes: map[int32]int64{0: 12},
		commit: map[int32]int64{0: 12},
	}, {
		name:  "nothing moved: nothing written, nothing committed",
		snap:  commitSnap(map[int32][2]int64{0: {10, 15}}),
		marks: map[int32]int64{0: 10},
		kafka: kafkaAt(map[int32]int64{0: 10}, "leader"),
		mem:   func(m *commitMemory) { m.kafkaAt[ctp(0)] = 10 },
	}, {
		name:  "a watermark below the record never moves it back",
		snap:  commitSnap(map[int32][2]int64{0: {10, 15}}),
		marks: map[int32]int64{0: 8},
		kafka: kafkaAt(map[int32]int64{0: 10}, "leader"),
		mem:   func(m *commitMemory) { m.kafkaAt[ctp(0)] = 10 },
	}, {
		name:  "no record: Kafka's offset is the floor (a group moving from a plain consumer group)",
		snap:  commitSnap(nil),
		marks: map[int32]int64{0: 10, 1: 60},
		kafka: kafkaAt(map[int32]int64{0: 50, 1: 50}, ""),
		// Partition 0 stays at Kafka's 50; partition 1 passed it.
		writes: map[int32]int64{1: 60},
		commit: map[int32]int64{1: 60},
	}, {
		name:  "Kafka's offset never read: nothing for the partition",
		snap:  commitSnap(map[int32][2]int64{0: {10, 15}}),
		marks: map[int32]int64{0: 30},
	}, {
		name:   "Kafka's read failed this round: the last known offset stands",
		snap:   commitSnap(map[int32][2]int64{0: {10, 15}}),
		marks:  map[int32]int64{0: 30},
		mem:    func(m *commitMemory) { m.kafkaAt[ctp(0)] = 10 },
		writes: map[int32]int64{0: 30},
		commit: map[int32]int64{0: 30},
	}, {
		name:   "a record lost from Kafka is committed again, no write (not a repair: Kafka held what this leader last knew)",
		snap:   commitSnap(map[int32][2]int64{0: {10, 15}}),
		marks:  map[int32]int64{0: 10},
		kafka:  kafkaAt(map[int32]int64{0: 4}, "leader"),
		mem:    func(m *commitMemory) { m.kafkaAt[ctp(0)] = 4; m.kafkaBy[ctp(0)] = "leader" },
		commit: map[int32]int64{0: 10},
	}, {
		name:    "a late keyshare commit below the record is repaired",
		snap:    commitSnap(map[int32][2]int64{0: {10, 15}}),
		marks:   map[int32]int64{0: 10},
		kafka:   kafkaAt(map[int32]int64{0: 4}, "old-leader"),
		mem:     func(m *commitMemory) { m.kafkaAt[ctp(0)] = 10 },
		commit:  map[int32]int64{0: 10},
		repairs: map[int32]int64{0: 4},
	}, {
		name:    "a takeover finding Kafka below the record repairs it",
		snap:    commitSnap(map[int32][2]int64{0: {10, 15}}),
		marks:   map[int32]int64{0: 10},
		kafka:   kafkaAt(map[int32]int64{0: 4}, "old-leader"),
		commit:  map[int32]int64{0: 10},
		repairs: map[int32]int64{0: 4},
	}, {
		name:    "an offset above the record is repaired, whoever wrote it",
		snap:    commitSnap(map[int32][2]int64{0: {10, 15}, 1: {10, 16}}),
		marks:   map[int32]int64{0: 10, 1: 10},
		kafka:   map[assign.TopicPartition]KafkaOffset{ctp(0): {Offset: 80}, ctp(1): {Offset: 80, By: "old-leader"}},
		mem:     func(m *commitMemory) { m.kafkaAt[ctp(0)], m.kafkaAt[ctp(1)] = 10, 10 },
		commit:  map[int32]int64{0: 10, 1: 10},
		repairs: map[int32]int64{0: 80, 1: 80},
	}, {
		name:    "an offset set outside keyshare (no mark) since the last read is repaired",
		snap:    commitSnap(map[int32][2]int64{0: {10, 15}}),
		marks:   map[int32]int64{0: 12},
		kafka:   kafkaAt(map[int32]int64{0: 11}, ""),
		mem:     func(m *commitMemory) { m.kafkaAt[ctp(0)] = 10 },
		writes:  map[int32]int64{0: 12},
		commit:  map[int32]int64{0: 12},
		repairs: map[int32]int64{0: 11},
	}, {
		name:   "the same offset with keyshare's mark, between the old record and the new, is no repair",
		snap:   commitSnap(map[int32][2]int64{0: {10, 15}}),
		marks:  map[int32]int64{0: 12},
		kafka:  kafkaAt(map[int32]int64{0: 11}, "old-leader"),
		mem:    func(m *commitMemory) { m.kafkaAt[ctp(0)] = 10 },
		writes: map[int32]int64{0: 12},
		commit: map[int32]int64{0: 12},
	}, {
		name:   "an operator's reset below Kafka is committed as the reset, not a repair",
		snap:   resetSnap(5, 15, 14),
		marks:  map[int32]int64{0: 5},
		kafka:  kafkaAt(map[int32]int64{0: 50}, "leader"),
		mem:    func(m *commitMemory) { m.kafkaAt[ctp(0)] = 50 },
		commit: map[int32]int64{0: 5},
		resets: map[int32]int64{0: 14},
	}, {
		name:    "a reset already committed: Kafka back above it is a repair",
		snap:    resetSnap(5, 15, 14),
		marks:   map[int32]int64{0: 5},
		kafka:   kafkaAt(map[int32]int64{0: 50}, "old-leader"),
		mem:     func(m *commitMemory) { m.kafkaAt[ctp(0)] = 5; m.resets[ctp(0)] = 14 },
		commit:  map[int32]int64{0: 5},
		repairs: map[int32]int64{0: 50},
	}, {
		name:    "a record past the log end and the watermark is damaged: the watermark is written in its place, nothing committed",
		snap:    commitSnap(map[int32][2]int64{0: {1_000_000, 15}}),
		marks:   map[int32]int64{0: 300},
		kafka:   kafkaAt(map[int32]int64{0: 300}, "leader"),
		ends:    map[int32]int64{0: 300},
		writes:  map[int32]int64{0: 300},
		damaged: []int32{0},
	}, {
		name:  "damaged, reported before: not reported again",
		snap:  commitSnap(map[int32][2]int64{0: {1_000_000, 15}}),
		marks: map[int32]int64{0: 300},
		kafka: kafkaAt(map[int32]int64{0: 300}, "leader"),
		ends:  map[int32]int64{0: 300},
		mem:   func(m *commitMemory) { m.damaged[ctp(0)] = 1_000_000 },
		// Recorded at 21, the watermark is what etcd holds: Kafka has it.
		writes: map[int32]int64{0: 300},
	}, {
		name:    "damaged while the watermark is past the end too (a stale end): nothing written or committed",
		snap:    commitSnap(map[int32][2]int64{0: {1_000_000, 15}}),
		marks:   map[int32]int64{0: 350},
		kafka:   kafkaAt(map[int32]int64{0: 200}, "leader"),
		mem:     func(m *commitMemory) { m.ends[ctp(0)] = 300 },
		damaged: []int32{0},
	}, {
		name:   "a record past a stale end but not past the watermark is sound",
		snap:   commitSnap(map[int32][2]int64{0: {320, 15}}),
		marks:  map[int32]int64{0: 350},
		kafka:  kafkaAt(map[int32]int64{0: 320}, "leader"),
		mem:    func(m *commitMemory) { m.kafkaAt[ctp(0)] = 320; m.ends[ctp(0)] = 300 },
		writes: map[int32]int64{0: 350},
		commit: map[int32]int64{0: 350},
	}, {
		name:   "this leader's own write, ahead of the cache, is the floor",
		snap:   commitSnap(map[int32][2]int64{0: {10, 15}}),
		marks:  map[int32]int64{0: 12},
		kafka:  kafkaAt(map[int32]int64{0: 12}, "leader"),
		mem:    func(m *commitMemory) { m.kafkaAt[ctp(0)] = 12; m.wrote[ctp(0)] = written{rev: 25, offset: 12} },
		commit: nil,
	}, {
		name:  "a write the cache has caught up with is the cache's to tell (a topic reset deleted it)",
		snap:  commitSnap(nil),
		marks: map[int32]int64{0: 5},
		kafka: kafkaAt(map[int32]int64{0: 0}, "recreated-topic-reset"),
		mem:   func(m *commitMemory) { m.kafkaAt[ctp(0)] = 50; m.wrote[ctp(0)] = written{rev: 20, offset: 50} },
		// Kafka's 0 is the floor again, so the new log's watermark is
		// recorded and committed.
		writes: map[int32]int64{0: 5},
		commit: map[int32]int64{0: 5},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := newCommitMemory()
			if c.mem != nil {
				c.mem(m)
			}
			p := m.plan(commitInput{snap: c.snap, marks: tpMap(c.marks), kafka: c.kafka, ends: tpMap(c.ends)})
			gotWrites := make(map[assign.TopicPartition]int64)
			revs := make(map[assign.TopicPartition]int64)
			for _, w := range p.writes {
				if w.PrevRev != c.snap.CommitRevs[w.TopicPartition] {
					t.Errorf("write %v guarded by revision %d, want the record's %d", w.TopicPartition, w.PrevRev, c.snap.CommitRevs[w.TopicPartition])
				}
				gotWrites[w.TopicPartition] = w.Offset
				revs[w.TopicPartition] = 21
			}
			assertTPs(t, "records written", gotWrites, tpMap(c.writes))
			var damaged []int32
			for _, d := range p.damaged {
				damaged = append(damaged, d.tp.Partition)
			}
			if !slices.Equal(damaged, c.damaged) {
				t.Errorf("damaged records reported %v, want %v", damaged, c.damaged)
			}
			if n := p.recorded(revs); n != len(c.writes) {
				t.Errorf("recorded %d, want %d", n, len(c.writes))
			}
			k := p.toKafka()
			assertTPs(t, "commits", k.commit, tpMap(c.commit))
			assertTPs(t, "repairs", k.repairs, tpMap(c.repairs))
			assertTPs(t, "resets", k.resets, tpMap(c.resets))

			// Kafka takes every commit: it holds them, the repairs are
			// reported with their writer, the resets remembered.
			out := p.committed(k, nil)
			if out.committed != len(c.commit) || out.failed != 0 || len(out.repaired) != len(c.repairs) || len(out.resets) != len(c.resets) {
				t.Errorf("outcome %+v, want %d committed, %d repaired, %d resets", out, len(c.commit), len(c.repairs), len(c.resets))
			}
			for tp, o := range k.commit {
				if m.kafkaAt[tp] != o || m.kafkaBy[tp] != "" {
					t.Errorf("%v: memory holds Kafka at %d by %q, want %d by this leader", tp, m.kafkaAt[tp], m.kafkaBy[tp], o)
				}
			}
			for tp, e := range k.resets {
				if m.resets[tp] != e {
					t.Errorf("%v: reset epoch %d remembered, want %d", tp, m.resets[tp], e)
				}
			}
		})
	}
}

// resetSnap is partition 0's commit record as an operator's reset writes
// it: offset, revision, reset epoch.
func resetSnap(offset, rev, epoch int64) *schema.Snapshot {
	s := commitSnap(map[int32][2]int64{0: {offset, rev}})
	rec := s.Commits[ctp(0)]
	rec.Reset = epoch
	s.Commits[ctp(0)] = rec
	return s
}

func assertTPs(t *testing.T, what string, got, want map[assign.TopicPartition]int64) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !maps.Equal(got, want) {
		t.Errorf("%s %v, want %v", what, got, want)
	}
}

// TestCommitPlanRounds: decisions that span rounds.
func TestCommitPlanRounds(t *testing.T) {
	t.Run("a reset is committed once, then only what moves", func(t *testing.T) {
		m := newCommitMemory()
		m.kafkaAt[ctp(0)] = 50
		snap := resetSnap(5, 15, 14)
		p := m.plan(commitInput{snap: snap, marks: tpMap(map[int32]int64{0: 5}), kafka: kafkaAt(map[int32]int64{0: 50}, "leader")})
		p.committed(p.toKafka(), nil)
		// Next round Kafka holds the reset's 5: nothing to do.
		p = m.plan(commitInput{snap: snap, marks: tpMap(map[int32]int64{0: 5}), kafka: kafkaAt(map[int32]int64{0: 5}, "leader")})
		if k := p.toKafka(); len(p.writes) != 0 || len(k.commit) != 0 {
			t.Fatalf("after the reset: writes %v, commits %v; want none", p.writes, k.commit)
		}
		// The watermark moves on from the reset.
		p = m.plan(commitInput{snap: snap, marks: tpMap(map[int32]int64{0: 8}), kafka: kafkaAt(map[int32]int64{0: 5}, "leader")})
		p.recorded(map[assign.TopicPartition]int64{ctp(0): 21})
		if k := p.toKafka(); !maps.Equal(k.commit, tpMap(map[int32]int64{0: 8})) || len(k.resets) != 0 || len(k.repairs) != 0 {
			t.Fatalf("after the watermark moved: %+v, want 8 committed, no reset, no repair", k)
		}
	})
	t.Run("a write etcd did not store is neither remembered nor committed", func(t *testing.T) {
		m := newCommitMemory()
		p := m.plan(commitInput{snap: commitSnap(map[int32][2]int64{0: {10, 15}, 1: {10, 16}}), marks: tpMap(map[int32]int64{0: 20, 1: 20}), kafka: kafkaAt(map[int32]int64{0: 10, 1: 10}, "leader")})
		if n := p.recorded(map[assign.TopicPartition]int64{ctp(0): 21}); n != 1 {
			t.Fatalf("recorded %d, want 1", n)
		}
		if k := p.toKafka(); !maps.Equal(k.commit, tpMap(map[int32]int64{0: 20})) {
			t.Fatalf("commits %v, want only the stored t/0 at 20", k.commit)
		}
		if _, ok := m.wrote[ctp(1)]; ok {
			t.Fatal("the conflicting write is remembered as written")
		}
	})
	t.Run("Kafka refuses one: it keeps what Kafka held, the next round commits it again", func(t *testing.T) {
		m := newCommitMemory()
		snap := commitSnap(map[int32][2]int64{0: {10, 15}, 1: {10, 16}})
		in := commitInput{snap: snap, marks: tpMap(map[int32]int64{0: 10, 1: 10}), kafka: kafkaAt(map[int32]int64{0: -1, 1: -1}, "")}
		p := m.plan(in)
		out := p.committed(p.toKafka(), map[assign.TopicPartition]error{ctp(1): errors.New("refused")})
		if out.committed != 1 || out.failed != 1 || out.firstBad != "t/1: refused" {
			t.Fatalf("outcome %+v, want 1 committed, 1 failed (t/1: refused)", out)
		}
		if m.kafkaAt[ctp(0)] != 10 || m.kafkaAt[ctp(1)] != -1 {
			t.Fatalf("memory holds Kafka at %d, %d; want 10, -1", m.kafkaAt[ctp(0)], m.kafkaAt[ctp(1)])
		}
		in.kafka = nil // Kafka's read fails: the memory stands
		p = m.plan(in)
		if k := p.toKafka(); !maps.Equal(k.commit, tpMap(map[int32]int64{1: 10})) {
			t.Fatalf("next round commits %v, want only the refused t/1 at 10", k.commit)
		}
	})
	t.Run("a repair the fresh state does not confirm waits for the next round", func(t *testing.T) {
		m := newCommitMemory()
		m.kafkaAt[ctp(0)], m.kafkaAt[ctp(1)] = 10, 10
		snap := commitSnap(map[int32][2]int64{0: {10, 15}, 1: {10, 16}})
		p := m.plan(commitInput{snap: snap, marks: tpMap(map[int32]int64{0: 10, 1: 10}), kafka: kafkaAt(map[int32]int64{0: 3, 1: 3}, "")})
		k := p.toKafka()
		// t/1's record changed since the snapshot (a reset just wrote
		// it): Kafka's 3 may be that reset's commit.
		fresh := commitSnap(map[int32][2]int64{0: {10, 15}, 1: {3, 22}})
		p.unconfirmed(k, fresh)
		if !maps.Equal(k.commit, tpMap(map[int32]int64{0: 10})) || !maps.Equal(k.repairs, tpMap(map[int32]int64{0: 3})) {
			t.Fatalf("after confirming: commits %v, repairs %v; want t/0 only", k.commit, k.repairs)
		}
		k.dropRepairs()
		if len(k.commit) != 0 || len(k.repairs) != 0 {
			t.Fatalf("after dropping the repairs: commits %v, repairs %v; want none", k.commit, k.repairs)
		}
	})
	t.Run("figures: the end as this round read it, Kafka's offset as known", func(t *testing.T) {
		m := newCommitMemory()
		m.ends[ctp(1)] = 90 // an earlier round's: not this round's figure
		p := m.plan(commitInput{snap: commitSnap(nil), marks: tpMap(map[int32]int64{0: 10, 1: 20}), kafka: kafkaAt(map[int32]int64{0: 4}, ""), ends: tpMap(map[int32]int64{0: 100})})
		want := map[assign.TopicPartition]PartitionOffsets{ctp(0): {End: 100, Safe: 10, Committed: 4}, ctp(1): {End: -1, Safe: 20, Committed: -1}}
		if got := p.partitions(); !maps.Equal(got, want) {
			t.Fatalf("figures %v, want %v", got, want)
		}
	})
}
