package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/schema"
)

// ParkedSuffix names a topic's default parking topic: <topic>.keyshare-parked.
const ParkedSuffix = ".keyshare-parked"

// ParkRequest asks for one key's records to be parked.
type ParkRequest struct {
	KeyQuery
	// ParkTopic receives the parked records; default the key's topic
	// with ParkedSuffix. Created if absent, with the key's topic's
	// partition count; an existing one needs at least that many.
	ParkTopic string
	Reason    string
	By        string // who asks (keyshare key: user@host)
}

// ParkKey parks a key: from the time its owner learns of it (within
// about a second), the key's records are not handled but copied in order
// to the parking topic, into the partition of the key's partition number,
// with their origin in keyshare's headers (consumer.HeaderTopic, …); each
// counts done once the copy is acknowledged, so the committed offset
// moves on. Other keys go on. It refuses, with an error wrapping
// ErrBadKeyQuery and changing nothing, an unknown topic or partition, a
// key longer than state.MaxKeyOpKeyBytes, a key that already has an
// operation, a parking topic that is the key's own, one the group
// consumes, or one with fewer partitions than the key's topic.
func (g *Group) ParkKey(ctx context.Context, r ParkRequest) (KeyOp, error) {
	if err := checkOpText(r.Reason, r.By); err != nil {
		return KeyOp{}, err
	}
	if len(r.Key) > schema.MaxKeyOpKeyBytes {
		return KeyOp{}, fmt.Errorf("%w: a key of %d bytes: operations take keys of at most %d", ErrBadKeyQuery, len(r.Key), schema.MaxKeyOpKeyBytes)
	}
	if r.ParkTopic == "" {
		r.ParkTopic = r.Topic + ParkedSuffix
	}
	if r.ParkTopic == r.Topic {
		return KeyOp{}, fmt.Errorf("%w: parking topic %s is the key's own topic: name another", ErrBadKeyQuery, textsafe.Quote(r.ParkTopic))
	}
	if err := coord.CheckName("parking topic", r.ParkTopic); err != nil {
		return KeyOp{}, fmt.Errorf("%w: %w", ErrBadKeyQuery, err)
	}
	snap, err := coord.ReadSnapshot(ctx, g.cli, g.group)
	if err != nil {
		return KeyOp{}, fmt.Errorf("admin: %w", err)
	}
	if err := parkTopicOutsideGroup(snap, r.ParkTopic); err != nil {
		return KeyOp{}, err
	}
	r.MaxScan = 1 // the key's place and operation; its records are not needed
	info, err := g.DescribeKey(ctx, r.KeyQuery)
	if err != nil {
		return KeyOp{}, err
	}
	where := fmt.Sprintf("key %s of %s/%d", textsafe.Quote(string(r.Key)), textsafe.Quote(info.Topic), info.Partition)
	if info.Op != nil {
		return KeyOp{}, fmt.Errorf("%w: %s already has an operation (%s): cancel it first (keyshare key cancel)", ErrBadKeyQuery, where, info.Op.Op)
	}
	n, err := g.partitionCount(info.Topic)
	if err != nil {
		return KeyOp{}, err
	}
	if err := g.ensureParkTopic(ctx, r.ParkTopic, n); err != nil {
		return KeyOp{}, err
	}
	end, err := g.endOffset(ctx, r.ParkTopic, info.Partition)
	if err != nil {
		return KeyOp{}, err
	}
	rec := schema.KeyOpRecord{Op: schema.KeyOpPark, Topic: info.Topic, Partition: info.Partition, Key: r.Key,
		ParkTopic: r.ParkTopic, ParkFrom: end, By: r.By, Reason: r.Reason}
	op, err := coord.PutKeyOp(ctx, g.cli, g.group, rec, 0)
	if errors.Is(err, coord.ErrKeyOpChanged) {
		return KeyOp{}, fmt.Errorf("%w: %s was given an operation while the park was being set: look again (keyshare key describe)", ErrBadKeyQuery, where)
	}
	if err != nil {
		return KeyOp{}, fmt.Errorf("admin: %w", err)
	}
	return keyOpOf(op), nil
}

// parkTopicOutsideGroup refuses a parking topic the group consumes: its
// members would handle the parked copies as records of their own.
func parkTopicOutsideGroup(snap *schema.Snapshot, topic string) error {
	for _, r := range snap.Ranges {
		if r.Record.Topic == topic {
			return fmt.Errorf("%w: parking topic %s is consumed by the group: its members would handle the parked copies as new records; name another", ErrBadKeyQuery, textsafe.Quote(topic))
		}
	}
	return nil
}

// partitionCount is topic's partition count in Kafka, 0 if it does not
// exist.
func (g *Group) partitionCount(topic string) (int, error) {
	md, err := g.kc.GetMetadata(&topic, false, kafkaTimeoutMs)
	if err != nil {
		return 0, fmt.Errorf("admin: read metadata of topic %q: %w", topic, err)
	}
	tm, ok := md.Topics[topic]
	if !ok || tm.Error.Code() == kafka.ErrUnknownTopicOrPart || tm.Error.Code() == kafka.ErrUnknownTopic {
		return 0, nil
	}
	if tm.Error.Code() != kafka.ErrNoError {
		return 0, fmt.Errorf("admin: topic %q: %w", topic, tm.Error)
	}
	return len(tm.Partitions), nil
}

// ensureParkTopic creates the parking topic with n partitions if it does
// not exist, and refuses one with fewer.
func (g *Group) ensureParkTopic(ctx context.Context, topic string, n int) error {
	have, err := g.partitionCount(topic)
	if err != nil {
		return err
	}
	if have >= n {
		return nil
	}
	if have > 0 {
		return fmt.Errorf("%w: parking topic %q has %d partitions, fewer than the key's topic's %d: name another (--park-topic) or add partitions", ErrBadKeyQuery, topic, have, n)
	}
	a, err := kafka.NewAdminClientFromConsumer(g.kc)
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	defer a.Close()
	res, err := a.CreateTopics(ctx, []kafka.TopicSpecification{{Topic: topic, NumPartitions: n, ReplicationFactor: -1}},
		kafka.SetAdminOperationTimeout(kafkaTimeoutMs*time.Millisecond))
	if err != nil {
		return fmt.Errorf("admin: create parking topic %q: %w", topic, err)
	}
	for _, r := range res {
		if c := r.Error.Code(); c != kafka.ErrNoError && c != kafka.ErrTopicAlreadyExists {
			return fmt.Errorf("admin: create parking topic %q: %w", topic, r.Error)
		}
	}
	// The new topic's partitions have leaders once its metadata lists them.
	for deadline := time.Now().Add(kafkaTimeoutMs * time.Millisecond); ; {
		have, err := g.partitionCount(topic)
		if err == nil && have >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("admin: parking topic %q created, but its %d partitions are not in Kafka's metadata after %ds: %v", topic, n, kafkaTimeoutMs/1000, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// UnparkRequest asks for a parked key's records to be handled.
type UnparkRequest struct {
	KeyQuery
	By string // who asks (keyshare key: user@host)
}

// UnparkKey unparks a key: its owner, before the key's next live record
// (or at once, with none), handles the key's parked records in their
// original order, read from the parking topic from where the park began;
// it records its progress in the operation, so a range moved meanwhile
// resumes at the new owner from there, and deletes the operation at the
// parking partition's end; the key's live records then run. A key that
// is not parked is refused with an error wrapping ErrBadKeyQuery.
func (g *Group) UnparkKey(ctx context.Context, r UnparkRequest) (KeyOp, error) {
	if err := checkOpText("", r.By); err != nil {
		return KeyOp{}, err
	}
	if len(r.Key) > schema.MaxKeyOpKeyBytes {
		return KeyOp{}, fmt.Errorf("%w: a key of %d bytes: operations take keys of at most %d", ErrBadKeyQuery, len(r.Key), schema.MaxKeyOpKeyBytes)
	}
	r.MaxScan = 1
	info, err := g.DescribeKey(ctx, r.KeyQuery)
	if err != nil {
		return KeyOp{}, err
	}
	where := fmt.Sprintf("key %s of %s/%d", textsafe.Quote(string(r.Key)), textsafe.Quote(info.Topic), info.Partition)
	old, ok, err := coord.ReadKeyOp(ctx, g.cli, g.group, info.Topic, info.Partition, r.Key)
	if err != nil {
		return KeyOp{}, fmt.Errorf("admin: %w", err)
	}
	switch {
	case !ok:
		return KeyOp{}, fmt.Errorf("%w: %s is not parked: nothing to unpark", ErrBadKeyQuery, where)
	case old.Err != nil:
		return KeyOp{}, fmt.Errorf("%w: %s: its operation is damaged (%v): cancel it (keyshare key cancel)", ErrBadKeyQuery, where, old.Err)
	case old.Record.Op != schema.KeyOpPark:
		return KeyOp{}, fmt.Errorf("%w: %s is not parked (its operation is a %s)", ErrBadKeyQuery, where, old.Record.Op)
	}
	rec := old.Record
	rec.Op, rec.Next, rec.By, rec.At = schema.KeyOpUnpark, rec.ParkFrom, r.By, time.Time{}
	op, err := coord.PutKeyOp(ctx, g.cli, g.group, rec, old.Rev)
	if errors.Is(err, coord.ErrKeyOpChanged) {
		return KeyOp{}, fmt.Errorf("%w: %s: its park changed while the unpark was being set: look again (keyshare key describe)", ErrBadKeyQuery, where)
	}
	if err != nil {
		return KeyOp{}, fmt.Errorf("admin: %w", err)
	}
	return keyOpOf(op), nil
}

// endOffset is the end offset of topic/partition. A topic just created may
// have no leader yet for a moment (Apache Kafka answers "not leader" until
// it has elected one): asked again until it answers, for the Kafka timeout.
func (g *Group) endOffset(ctx context.Context, topic string, partition int32) (int64, error) {
	deadline := time.Now().Add(kafkaTimeoutMs * time.Millisecond)
	for {
		_, end, err := g.kc.QueryWatermarkOffsets(topic, partition, kafkaTimeoutMs)
		if err == nil {
			return end, nil
		}
		var ke kafka.Error
		retry := errors.As(err, &ke) && (ke.Code() == kafka.ErrNotLeaderForPartition || ke.Code() == kafka.ErrLeaderNotAvailable ||
			ke.Code() == kafka.ErrUnknownTopicOrPart || ke.Code() == kafka.ErrUnknownPartition)
		if !retry || time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("admin: read the end of %s/%d: %w", topic, partition, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
