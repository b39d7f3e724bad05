package schema

import (
	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/ledger"
)

// Snapshot is a group's whole state in etcd, read at one revision.
type Snapshot struct {
	Rev        int64
	Generation GenerationRecord
	Members    map[string]Member
	Ranges     []RangeState // sorted by topic, partition, first hash
	Commits    map[assign.TopicPartition]CommitRecord
	CommitRevs map[assign.TopicPartition]int64 // ModRevision of each commit key
	// Stuck lists the ranges their owners report as held by a stuck record.
	Stuck []StuckRecord
	// Losses lists the records ranges lost to retention, oldest log start
	// first per range.
	Losses []LossRecord
	// Orphans are ledger keys without a range record (left by a damaged
	// range record); the leader deletes them.
	Orphans    []string
	OrphanRevs map[string]int64 // ModRevision of each orphan
	// BadRanges maps range keys whose record is damaged to their
	// ModRevision; the leader replaces or deletes them. A record that
	// overlaps an earlier-starting record of its partition is damaged too
	// (the earlier one wins): it is in BadRanges and Problems, never in
	// Ranges, so no view (Owned, AssignmentOf, Slices, Watermarks,
	// Partitions) gives one hash to two members.
	BadRanges map[string]int64
	// BadMembers maps member keys written without a lease to their
	// ModRevision: no session keeps them alive, so they are not members
	// and the leader deletes them.
	BadMembers map[string]int64
	// Loads are the load reports of registered members that read as
	// measurements, by member id (only in the leader's snapshot, not in
	// ReadSnapshot's). BadLoads are the others, by the id in their key:
	// malformed, absurd, or from a member that is not registered. No report
	// moves a range by itself: the leader judges the trusted loads on its own
	// timer, once the group is still.
	Loads    map[string]ReceivedLoad
	BadLoads map[string]error
	// Problems lists every value that could not be read. The leader
	// repairs what it can: it replaces bad range records and ledger entries
	// and writes a fresh generation.
	Problems []error
}

// Member is a registered member as seen in a snapshot.
type Member struct {
	MemberInfo
	CreateRev int64 // revision that created the registration: its session
	// DrainMs is a leaving member's drain budget from leaving/<id>, in
	// the leader's snapshot only; 0 when it wrote none (it waits to be
	// revoked, as members did before LeaveRecord).
	DrainMs int64
	// Lease is the registration's lease: the leader writes a leaving
	// member's handoff plan under it.
	Lease int64 `json:"-"`
	// Handoff is the handoff plan stored for a leaving member, in the
	// leader's snapshot only.
	Handoff StoredHandoff `json:"-"`
}

// RangeState is a range record and its ledger entry.
type RangeState struct {
	Key       string
	Record    RangeRecord
	Rev       int64 // ModRevision of the range key
	LedgerKey string
	Entry     ledger.Entry
	EntryRev  int64 // ModRevision of the ledger key; 0 if it does not exist
	EntryErr  error // the ledger entry is malformed
}

// TP is the range's partition.
func (r RangeState) TP() assign.TopicPartition {
	return assign.TopicPartition{Topic: r.Record.Topic, Partition: r.Record.Partition}
}

// Assignment is what a member owns at one etcd revision: its ranges (active
// or revoking) with the ledger state stored for them.
type Assignment struct {
	Generation int64
	Rev        int64
	Ranges     []RangeState
}

// KeyValue is one key as read from etcd, with the revisions and lease the
// decoding looks at.
type KeyValue struct {
	Key, Value     []byte
	CreateRevision int64
	ModRevision    int64
	Lease          int64
}

// GroupKVs is what a snapshot is built from: a group's keys read at one
// revision, each kind in key order, as a range read returns them: members,
// ranges, ledger, commits, generation, stuck, lost.
type GroupKVs [7][]KeyValue

// BuildSnapshot decodes and classifies group g's keys read at rev. It does
// no I/O. memo, if not nil, holds the values decoded by the last build:
// those whose key and revision have not changed are not decoded again, and
// memo is updated to this build's values.
func BuildSnapshot(g Group, rev int64, r GroupKVs, memo *DecodeMemo) *Snapshot {
	return buildSnapshotMemo(g.Keys(), rev, r, memo)
}

// DecodeMemo keeps the decoded values of the last build, by key and
// ModRevision, so that the leader's cache decodes only the values that
// changed: decoding is most of a build's cost (about 120 ms for 4,096
// partitions on this project's test machines), and a ledger flush changes a
// few keys of thousands.
type DecodeMemo struct {
	members map[string]memoized[MemberInfo]
	ranges  map[string]memoized[RangeRecord]
	ledger  map[string]memoized[ledger.Entry]
	commits map[string]memoized[CommitRecord]
}

type memoized[T any] struct {
	rev int64
	rng ledger.HashRange // for ledger entries: the range it was checked against
	v   T
	err error
}

// NewDecodeMemo returns an empty memo for BuildSnapshot.
func NewDecodeMemo() *DecodeMemo { return &DecodeMemo{} }

// memoDecode returns the value of key at rev from old, or decodes it; it
// records the result in next.
func memoDecode[T any](old, next map[string]memoized[T], key string, rev int64, rng ledger.HashRange, decode func() (T, error)) (T, error) {
	if m, ok := old[key]; ok && m.rev == rev && m.rng == rng {
		if next != nil {
			next[key] = m
		}
		return m.v, m.err
	}
	v, err := decode()
	if next != nil {
		next[key] = memoized[T]{rev: rev, rng: rng, v: v, err: err}
	}
	return v, err
}

// buildSnapshotMemo decodes the keys read at rev, reusing the values memo
// decoded last time (nil: decode everything); it updates memo to this
// build's values.
func buildSnapshotMemo(s Keys, rev int64, r GroupKVs, memo *DecodeMemo) *Snapshot {
	b := snapshotBuilder{s: s, old: memo}
	if memo != nil {
		b.next = &DecodeMemo{
			members: make(map[string]memoized[MemberInfo], len(r[0])),
			ranges:  make(map[string]memoized[RangeRecord], len(r[1])),
			ledger:  make(map[string]memoized[ledger.Entry], len(r[2])),
			commits: make(map[string]memoized[CommitRecord], len(r[3])),
		}
		defer func() { *memo = *b.next }()
	} else {
		b.old, b.next = &DecodeMemo{}, &DecodeMemo{}
	}
	b.snap = &Snapshot{
		Rev:     rev,
		Members: make(map[string]Member),
		Commits: make(map[assign.TopicPartition]CommitRecord),

		CommitRevs: make(map[assign.TopicPartition]int64),

		BadRanges:  make(map[string]int64),
		BadMembers: make(map[string]int64),
	}
	b.members(r[0])
	b.ranges(r[1])
	b.dropOverlaps()
	b.ledgerEntries(r[2])
	b.commits(r[3])
	b.generation(r[4])
	b.stuck(r[5])
	b.losses(r[6])
	return b.snap
}

type ledgerKV struct {
	value []byte
	rev   int64
	used  bool
}

// Partitions groups the snapshot's ranges by partition. ReadSnapshot leaves
// overlapping records out of Ranges; a range that overlaps an earlier one
// anyway (a Snapshot built by hand) is dropped here too.
func (s *Snapshot) Partitions() map[assign.TopicPartition][]RangeState {
	out := make(map[assign.TopicPartition][]RangeState)
	for _, r := range s.Ranges {
		tp := r.TP()
		list := out[tp]
		if n := len(list); n > 0 && list[n-1].Record.Hi > r.Record.Lo {
			continue
		}
		out[tp] = append(list, r)
	}
	return out
}

// Watermarks returns the safe watermark of every partition whose ranges
// cover its whole hash space with readable ledger state: the lowest watermark
// of its ranges. Every record of the partition below it is done. Partitions
// with a gap, a range without state, or a damaged entry are left out: their
// safe offset is not known, so nothing may be committed for them.
func (s *Snapshot) Watermarks() map[assign.TopicPartition]int64 {
	out := make(map[assign.TopicPartition]int64)
	for tp, ranges := range s.Partitions() {
		at, w, ok := uint64(0), int64(0), true
		for i, r := range ranges {
			rw, init := r.Entry.Watermark()
			if r.Record.Lo != at || r.EntryErr != nil || !init {
				ok = false
				break
			}
			if i == 0 || rw < w {
				w = rw
			}
			at = r.Record.Hi
		}
		if ok && at == ledger.HashSpace {
			out[tp] = w
		}
	}
	return out
}

// OwnerOf returns the registration range r belongs to, and whether it is
// live: its owner's registration, if the record was written since that
// registration was created. A record older than its owner's registration
// was written for an earlier one under the same id (a process that
// registered again after its session ended), which is gone: the leader
// fails the range over once FailoverGrace has passed, and until then the
// new registration does not own it.
func (s *Snapshot) OwnerOf(r RangeState) (Member, bool) {
	m, ok := s.Members[r.Record.Owner]
	if !ok || r.Rev < m.CreateRev {
		return Member{}, false
	}
	return m, true
}

// Owned returns the ranges member id owns (active or revoking), with their
// ledger state: those of its current registration (OwnerOf), or all the
// ranges naming id if it is not registered.
func (s *Snapshot) Owned(id string) []RangeState {
	var out []RangeState
	since := s.Members[id].CreateRev
	for _, r := range s.Ranges {
		if r.Record.Owner == id && r.Record.State != StateReleased && r.Rev >= since {
			out = append(out, r)
		}
	}
	return out
}

// AssignmentOf is what member id owns in the snapshot, leaving out ranges
// whose ledger entry is damaged (the leader resets those first).
func (s *Snapshot) AssignmentOf(id string) Assignment {
	a := Assignment{Generation: s.Generation.Generation, Rev: s.Rev}
	for _, r := range s.Owned(id) {
		if r.EntryErr == nil {
			a.Ranges = append(a.Ranges, r)
		}
	}
	return a
}

// Slices returns the current ownership as the assignor sees it: a range being
// handed off already counts for its next owner.
func (s *Snapshot) Slices() []assign.Slice {
	var out []assign.Slice
	for _, r := range s.Ranges {
		owner := r.Record.Owner
		if r.Record.State != StateActive && r.Record.Target != "" {
			owner = r.Record.Target
		}
		out = append(out, assign.Slice{TopicPartition: r.TP(), Range: r.Record.Range(), Owner: owner})
	}
	return out
}

// ReleasesUnasked reports whether m is leaving and drains and releases its
// ranges itself: it wrote its drain budget (LeaveRecord). A leaving member
// that wrote none waits to be revoked.
func (m Member) ReleasesUnasked() bool { return m.Leaving && m.DrainMs > 0 }
