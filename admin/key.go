package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// KeyQuery names one key of one topic for DescribeKey.
type KeyQuery struct {
	Topic string
	Key   []byte
	// Partition is the key's partition; -1 computes it with Partitioner
	// (ConsistentRandom when empty).
	Partition   int32
	Partitioner Partitioner
	// MaxScan bounds the records read from the partition (default
	// DefaultMaxScan).
	MaxScan int
}

// DefaultMaxScan is the default bound on the records DescribeKey reads.
const DefaultMaxScan = 100_000

// KeyInfo is what the group knows of one key.
type KeyInfo struct {
	Topic     string
	Partition int32
	// PartitionFrom is "given", or the partitioner that computed it.
	PartitionFrom string
	Hash          uint32 // ledger.Hash of the key
	// Range is the range that holds the hash; nil when none does (the
	// leader has not assigned the partition yet).
	Range *KeyRange
	// Pending are the offsets of the key's records at or above the
	// range's watermark that its ledger, as last flushed to etcd, does not
	// count as handled, in order.
	Pending []int64
	// LastHandled is the greatest offset of the key the ledger counts as
	// handled, when the scan can tell (-1: unknown; a record below the
	// watermark is handled, but the ledger no longer says which were the
	// key's).
	LastHandled int64
	Scan        KeyScan
	Stuck       *KeyStuck // the group's stuck report naming the key
	// Op is the operation an operator set on the key (SkipKey), nil if
	// none.
	Op *KeyOp
}

// KeyRange is the range that holds a key's hash.
type KeyRange struct {
	Lo, Hi     uint64
	Owner      string
	OwnerLive  bool // the owner's registration holds the range (state.Snapshot.OwnerOf)
	State      string
	Target     string // the next owner while revoking or released
	Generation int64  // of the last change to the range record
	// Watermark is the lowest offset of the key's part of the range that
	// may not be handled; Next, the offset its ledger has seen up to. Both
	// are -1 when the range has no ledger state yet (its owner starts at
	// the group's committed offset).
	Watermark, Next int64
}

// KeyScan says which records DescribeKey read: [From, Stop) of the
// partition, whose end was End when the scan started.
type KeyScan struct {
	From, Stop, End int64
	Records         int
	// Complete is false when the scan stopped at MaxScan (or when the
	// context ended) before End: later records of the key are not shown.
	Complete bool
	// FromCommit: the range has no ledger state, the scan starts at the
	// group's committed offset (or the log start, with none recorded).
	FromCommit bool
}

// KeyStuck is a stuck report about the key: its owner saw the range's
// watermark held by this record.
type KeyStuck struct {
	Offset   int64
	Member   string
	Since    time.Time
	Attempts int
	Error    string // escaped (textsafe)
}

// ErrBadKeyQuery: the query names a topic the group does not consume, a
// partition the topic does not have, or an empty key the partitioner
// places at random.
var ErrBadKeyQuery = errors.New("admin: bad key query")

// DescribeKey reports where the group stands with one key: its partition
// and hash, the range and member that own it, its records the ledger has
// not seen handled (read from Kafka, from the range's watermark, at most
// q.MaxScan records), the stuck report naming it. It changes nothing.
func (g *Group) DescribeKey(ctx context.Context, q KeyQuery) (KeyInfo, error) {
	if g.kc == nil {
		return KeyInfo{}, errors.New("admin: describing a key needs the Kafka settings")
	}
	if err := q.withDefaults(); err != nil {
		return KeyInfo{}, err
	}
	if err := g.known(ctx); err != nil {
		return KeyInfo{}, err
	}
	snap, err := coord.ReadSnapshot(ctx, g.cli, g.group)
	if err != nil {
		return KeyInfo{}, fmt.Errorf("admin: %w", err)
	}
	if err := topicOfGroup(snap, q.Topic); err != nil {
		return KeyInfo{}, err
	}
	info := KeyInfo{Topic: q.Topic, Partition: q.Partition, PartitionFrom: "given", Hash: ledger.Hash(q.Key, 0), LastHandled: -1}
	if err := g.keyPartition(q, &info); err != nil {
		return KeyInfo{}, err
	}
	from, seg := keyRange(snap, &info)
	if len(q.Key) <= schema.MaxKeyOpKeyBytes {
		op, ok, err := coord.ReadKeyOp(ctx, g.cli, g.group, q.Topic, info.Partition, q.Key)
		if err != nil {
			return KeyInfo{}, fmt.Errorf("admin: %w", err)
		}
		if ok {
			kop := keyOpOf(op)
			info.Op = &kop
		}
	}

	low, high, err := g.kc.QueryWatermarkOffsets(q.Topic, info.Partition, kafkaTimeoutMs)
	if err != nil {
		return KeyInfo{}, fmt.Errorf("admin: read the bounds of %s/%d: %w", q.Topic, info.Partition, err)
	}
	if from < 0 {
		info.Scan.FromCommit = true
		from = low
		if c, ok := snap.Commits[assign.TopicPartition{Topic: q.Topic, Partition: info.Partition}]; ok {
			from = c.Offset
		}
	}
	from = max(from, low)
	info.Scan.From, info.Scan.Stop, info.Scan.End = from, from, high
	found, err := g.scanKey(ctx, q, info.Partition, &info.Scan, q.MaxScan)
	if err != nil {
		return KeyInfo{}, err
	}
	if info.Stuck, err = g.stuckOfKey(ctx, snap, q, &info, found, low, high); err != nil {
		return KeyInfo{}, err
	}
	info.Pending, info.LastHandled = pendingOfKey(found, seg, &info)
	return info, nil
}

// topicOfGroup refuses a topic that has no range in the group.
func topicOfGroup(snap *schema.Snapshot, topic string) error {
	var topics []string
	for _, r := range snap.Ranges {
		if r.Record.Topic == topic {
			return nil
		}
		if !slices.Contains(topics, r.Record.Topic) {
			topics = append(topics, r.Record.Topic)
		}
	}
	if len(topics) == 0 {
		return fmt.Errorf("%w: the group has no ranges yet, of topic %q or any other (no member has joined since it was created or reset)", ErrBadKeyQuery, topic)
	}
	return fmt.Errorf("%w: the group does not consume topic %q (its topics: %s)", ErrBadKeyQuery, topic,
		textsafe.FirstFew(topics, ", ", func(s string) string { return textsafe.Quote(s) }))
}

// scanKey reads the partition from sc.From until sc.End (or limit records)
// and returns the offsets of the key's records; it sets sc's Stop, Records
// and Complete.
func (g *Group) scanKey(ctx context.Context, q KeyQuery, partition int32, sc *KeyScan, limit int) ([]int64, error) {
	if sc.From >= sc.End {
		sc.Complete = true
		return nil, nil
	}
	cm := kafka.ConfigMap{}
	for k, v := range g.kcfg {
		cm[k] = v
	}
	cm["group.id"] = g.name // never joined nor committed: Assign only
	cm["enable.auto.commit"] = false
	cm["enable.auto.offset.store"] = false
	cm["enable.partition.eof"] = true
	if _, ok := cm["log_level"]; !ok {
		cm["log_level"] = 3
	}
	kc, err := kafka.NewConsumer(&cm)
	if err != nil {
		return nil, fmt.Errorf("admin: Kafka client: %w", err)
	}
	defer kc.Close()
	topic := q.Topic
	if err := kc.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: partition, Offset: kafka.Offset(sc.From)}}); err != nil {
		return nil, fmt.Errorf("admin: read %s/%d: %w", q.Topic, partition, err)
	}
	var found []int64
	// Brokers that stop answering end the scan with an error rather than
	// a wait without end: librdkafka retries them quietly.
	progress, lastErr := time.Now(), error(nil)
	for sc.Records < limit && sc.Stop < sc.End {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("admin: read %s/%d at offset %d: %w", q.Topic, partition, sc.Stop, err)
		}
		if time.Since(progress) > kafkaTimeoutMs*time.Millisecond {
			return nil, fmt.Errorf("admin: read %s/%d: no record at offset %d within %ds (last Kafka error: %v)", q.Topic, partition, sc.Stop, kafkaTimeoutMs/1000, lastErr)
		}
		switch e := kc.Poll(100).(type) {
		case *kafka.Message:
			progress = time.Now()
			if e.TopicPartition.Error != nil {
				return nil, fmt.Errorf("admin: read %s/%d at offset %d: %w", q.Topic, partition, sc.Stop, e.TopicPartition.Error)
			}
			o := int64(e.TopicPartition.Offset)
			if o >= sc.End {
				sc.Stop = sc.End
				break
			}
			sc.Records++
			sc.Stop = o + 1
			if e.Key != nil && string(e.Key) == string(q.Key) {
				found = append(found, o)
			}
		case kafka.PartitionEOF:
			// Transaction markers take offsets no message has: the end
			// of the log is where the broker says it is.
			sc.Stop = sc.End
		case kafka.Error:
			if e.IsFatal() {
				return nil, fmt.Errorf("admin: read %s/%d: %w", q.Topic, partition, e)
			}
			lastErr = e
		}
	}
	sc.Complete = sc.Stop >= sc.End
	return found, nil
}
