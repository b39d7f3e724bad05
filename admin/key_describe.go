package admin

import (
	"context"
	"fmt"
	"slices"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// withDefaults fills in the query's defaults and checks its partitioner.
func (q *KeyQuery) withDefaults() error {
	if q.Partitioner == "" {
		q.Partitioner = ConsistentRandom
	}
	if _, err := ParsePartitioner(string(q.Partitioner)); err != nil {
		return fmt.Errorf("%w: %w", ErrBadKeyQuery, err)
	}
	if q.Key == nil {
		q.Key = []byte{} // an empty key; a null one has no order to describe
	}
	if q.MaxScan <= 0 {
		q.MaxScan = DefaultMaxScan
	}
	return nil
}

// keyPartition checks the key's topic in Kafka, and its partition: the
// one given, or the one q.Partitioner places the key in.
func (g *Group) keyPartition(q KeyQuery, info *KeyInfo) error {
	topic := q.Topic
	md, err := g.kc.GetMetadata(&topic, false, kafkaTimeoutMs)
	if err != nil {
		return fmt.Errorf("admin: read metadata of topic %q: %w", q.Topic, err)
	}
	tm, ok := md.Topics[q.Topic]
	if !ok || tm.Error.Code() != kafka.ErrNoError || len(tm.Partitions) == 0 {
		return fmt.Errorf("%w: topic %q does not exist in Kafka", ErrBadKeyQuery, q.Topic)
	}
	n := int32(len(tm.Partitions))
	if q.Partition < 0 {
		p, err := q.Partitioner.Partition(q.Key, n)
		if err != nil {
			return fmt.Errorf("%w: %w; give the partition", ErrBadKeyQuery, err)
		}
		info.Partition, info.PartitionFrom = p, string(q.Partitioner)
	} else if q.Partition >= n {
		return fmt.Errorf("%w: topic %q has partitions 0-%d, not %d", ErrBadKeyQuery, q.Topic, n-1, q.Partition)
	}
	return nil
}

// keyRange sets info.Range to the range that owns the key's hash, and
// returns the watermark of its ledger segment holding the hash (where the
// scan starts; -1 without ledger state) and that segment.
func keyRange(snap *schema.Snapshot, info *KeyInfo) (from int64, seg ledger.Segment) {
	from = -1
	for _, r := range snap.Ranges {
		if r.Record.Topic != info.Topic || r.Record.Partition != info.Partition || !r.Record.Range().Contains(info.Hash) {
			continue
		}
		kr := &KeyRange{Lo: r.Record.Lo, Hi: r.Record.Hi, Owner: r.Record.Owner, State: r.Record.State, Target: r.Record.Target,
			Generation: r.Record.Gen, Watermark: -1, Next: -1}
		_, kr.OwnerLive = snap.OwnerOf(r)
		if r.EntryErr == nil {
			for _, s := range r.Entry.Segments {
				if s.Range().Contains(info.Hash) {
					seg, kr.Watermark, kr.Next = s, s.Watermark(), s.Next
				}
			}
		}
		info.Range = kr
		return kr.Watermark, seg
	}
	return from, seg
}

// stuckOfKey is the stuck report of the key's record, if any. A stuck
// report names its record's key only as shown, cut at textsafe.MaxKey
// bytes, so two long keys can read the same in it: a stuck record is this
// key's only if the record at its offset has the key, as the scan found it
// (found) or, outside the scan (a report the watermark has passed), as
// that one record read says. low and high are the partition's bounds.
func (g *Group) stuckOfKey(ctx context.Context, snap *schema.Snapshot, q KeyQuery, info *KeyInfo, found []int64, low, high int64) (*KeyStuck, error) {
	var stuck *KeyStuck
	for _, s := range snap.Stuck {
		if s.Topic != q.Topic || s.Partition != info.Partition || s.Key != textsafe.Bytes(q.Key) {
			continue
		}
		mine := slices.Contains(found, s.Offset)
		if !mine && (s.Offset < info.Scan.From || s.Offset >= info.Scan.Stop) && s.Offset >= low && s.Offset < high {
			one := KeyScan{From: s.Offset, Stop: s.Offset, End: s.Offset + 1}
			at, err := g.scanKey(ctx, q, info.Partition, &one, 1)
			if err != nil {
				return nil, err
			}
			mine = len(at) == 1
		}
		if !mine {
			continue
		}
		stuck = &KeyStuck{Offset: s.Offset, Member: s.Member, Since: s.Since, Attempts: s.Attempts, Error: textsafe.Escape(s.Error)}
	}
	return stuck, nil
}

// pendingOfKey splits the key's records found by the scan into the
// pending ones and the last handled (-1: not known). With ledger state, a
// record of the key is pending unless the segment counts it done;
// without, none is known done.
func pendingOfKey(found []int64, seg ledger.Segment, info *KeyInfo) (pending []int64, lastHandled int64) {
	lastDone := int64(-1)
	for _, o := range found {
		if !info.Scan.FromCommit && seg.Done(o, info.Hash) {
			lastDone = o
			continue
		}
		pending = append(pending, o)
	}
	// A key's records finish in order: the greatest done one is its last
	// handled if nothing of the key lies beyond the scan unread, or a
	// pending record of the key follows it.
	if lastDone >= 0 && (info.Scan.Complete || (len(pending) > 0 && pending[len(pending)-1] > lastDone)) {
		return pending, lastDone
	}
	return pending, -1
}
