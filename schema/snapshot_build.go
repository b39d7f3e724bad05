package schema

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/ledger"
)

// snapshotBuilder is one buildSnapshotMemo: it decodes each kind of key
// into snap, reusing the values old holds for keys whose revision has not
// changed and recording this build's values in next.
type snapshotBuilder struct {
	s         Keys
	old, next *DecodeMemo
	snap      *Snapshot
}

// problem records a key that could not be used.
func (b *snapshotBuilder) problem(err error) {
	b.snap.Problems = append(b.snap.Problems, err)
}

func (b *snapshotBuilder) members(kvs []KeyValue) {
	for _, kv := range kvs {
		if kv.Lease == 0 {
			// Not a session's registration: it would hold ranges for a
			// process that does not exist, forever.
			b.problem(&BadValueError{Key: string(kv.Key), Problem: "member registered without a lease (no session keeps it alive); not counted as a member, the leader deletes it"})
			b.snap.BadMembers[string(kv.Key)] = kv.ModRevision
			continue
		}
		m, err := memoDecode(b.old.members, b.next.members, string(kv.Key), kv.ModRevision, ledger.HashRange{}, func() (MemberInfo, error) {
			return decodeMember(b.s, string(kv.Key), kv.Value)
		})
		if err != nil {
			b.problem(err)
			continue
		}
		b.snap.Members[m.ID] = Member{MemberInfo: m, CreateRev: kv.CreateRevision, Lease: kv.Lease}
	}
}

// ranges decodes the range records, sorted by partition and first hash.
func (b *snapshotBuilder) ranges(kvs []KeyValue) {
	snap := b.snap
	for _, kv := range kvs {
		rec, err := memoDecode(b.old.ranges, b.next.ranges, string(kv.Key), kv.ModRevision, ledger.HashRange{}, func() (RangeRecord, error) {
			return decodeRange(b.s, string(kv.Key), kv.Value, kv.ModRevision)
		})
		if err != nil {
			b.problem(err)
			snap.BadRanges[string(kv.Key)] = kv.ModRevision
			continue
		}
		snap.Ranges = append(snap.Ranges, RangeState{Key: string(kv.Key), Record: rec, Rev: kv.ModRevision, LedgerKey: b.s.LedgerEntry(rec.Topic, rec.Partition, rec.Lo)})
	}
	slices.SortFunc(snap.Ranges, func(a, b RangeState) int {
		if c := assign.CompareTP(a.TP(), b.TP()); c != 0 {
			return c
		}
		return cmp.Compare(a.Record.Lo, b.Record.Lo)
	})
}

// dropOverlaps leaves out a record that overlaps an earlier one of its
// partition. Such a record is damaged (the leader never writes one): the
// record that starts first (the lower key) wins, and the other is left out
// of every view, so no hash has two owners; the leader deletes it and its
// ledger entry.
func (b *snapshotBuilder) dropOverlaps() {
	snap := b.snap
	kept := snap.Ranges[:0]
	for _, rs := range snap.Ranges {
		if n := len(kept); n > 0 && kept[n-1].TP() == rs.TP() && kept[n-1].Record.Hi > rs.Record.Lo {
			prev := kept[n-1].Record
			b.problem(&BadValueError{Key: rs.Key, Problem: fmt.Sprintf(
				"range %s of %s overlaps range %s of %s, which starts first and keeps its hashes; the leader deletes this record",
				rs.Record.Range(), rs.Record.Owner, prev.Range(), prev.Owner)})
			snap.BadRanges[rs.Key] = rs.Rev
			continue
		}
		kept = append(kept, rs)
	}
	snap.Ranges = kept
}

// ledgerEntries decodes each kept range's ledger entry against the range,
// and lists the entries no range uses as orphans.
func (b *snapshotBuilder) ledgerEntries(kvs []KeyValue) {
	snap := b.snap
	entries := make(map[string]*ledgerKV)
	for _, kv := range kvs {
		entries[string(kv.Key)] = &ledgerKV{value: kv.Value, rev: kv.ModRevision}
	}
	for i := range snap.Ranges {
		rs := &snap.Ranges[i]
		if e, ok := entries[rs.LedgerKey]; ok {
			e.used = true
			rs.EntryRev = e.rev
			rs.Entry, rs.EntryErr = memoDecode(b.old.ledger, b.next.ledger, rs.LedgerKey, e.rev, rs.Record.Range(), func() (ledger.Entry, error) {
				return ledger.Decode(rs.LedgerKey, e.value, rs.Record.Range())
			})
			if rs.EntryErr != nil {
				b.problem(rs.EntryErr)
			}
		}
	}
	snap.OrphanRevs = make(map[string]int64)
	for k, e := range entries {
		if !e.used {
			snap.Orphans = append(snap.Orphans, k)
			snap.OrphanRevs[k] = e.rev
		}
	}
	slices.Sort(snap.Orphans)
}

func (b *snapshotBuilder) commits(kvs []KeyValue) {
	for _, kv := range kvs {
		topic, part, err := ParseCommitKey(b.s.Commits(), string(kv.Key))
		if err != nil {
			b.problem(&BadValueError{Key: string(kv.Key), Problem: err.Error()})
			continue
		}
		c, err := memoDecode(b.old.commits, b.next.commits, string(kv.Key), kv.ModRevision, ledger.HashRange{}, func() (CommitRecord, error) {
			return DecodeCommit(string(kv.Key), kv.Value, kv.ModRevision)
		})
		if err != nil {
			b.problem(err)
			continue
		}
		tp := assign.TopicPartition{Topic: topic, Partition: part}
		b.snap.Commits[tp] = c
		b.snap.CommitRevs[tp] = kv.ModRevision
	}
}

func (b *snapshotBuilder) generation(kvs []KeyValue) {
	if len(kvs) != 1 {
		return
	}
	g, err := DecodeGeneration(string(kvs[0].Key), kvs[0].Value)
	if err != nil {
		b.problem(err)
		return
	}
	b.snap.Generation = g
}

func (b *snapshotBuilder) stuck(kvs []KeyValue) {
	for _, kv := range kvs {
		st, err := DecodeStuck(string(kv.Key), kv.Value)
		if err != nil {
			b.problem(err)
			continue
		}
		b.snap.Stuck = append(b.snap.Stuck, st)
	}
}

func (b *snapshotBuilder) losses(kvs []KeyValue) {
	for _, kv := range kvs {
		l, err := decodeLoss(b.s, string(kv.Key), kv.Value)
		if err != nil {
			b.problem(err)
			continue
		}
		b.snap.Losses = append(b.snap.Losses, l)
	}
}
