package statestore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/keystate"
)

// The changelog's Kafka side: the producer that appends changes, and the
// topics it appends to.

// deliveryTimeout bounds one append (librdkafka's message.timeout.ms,
// unless the user's Kafka settings give one): a record whose append has
// not been acknowledged by then fails, and is run again. It is short next
// to librdkafka's default of 5 minutes because an append still on its way
// after its range moved is a late write the range's next owner must
// repair (docs/state.md).
const deliveryTimeout = 30 * time.Second

// newAppender makes the changelog producer from the user's Kafka settings:
// idempotent with acks=all, so that appends of one partition land in the
// order they were sent and none is written twice by the producer's own
// retries, and with a short linger, so that the appends of keys handled in
// parallel share a request instead of taking a round trip each.
func newAppender(user kafka.ConfigMap, log hclog.Logger) (*kafka.Producer, error) {
	pm := consumer.ProducerConfig(user)
	pm["go.logs.channel.enable"] = true
	pm["acks"] = "all"
	pm["enable.idempotence"] = true
	if _, ok := pm["linger.ms"]; !ok {
		pm["linger.ms"] = 2
	}
	if _, ok := pm["message.timeout.ms"]; !ok {
		pm["message.timeout.ms"] = int(deliveryTimeout / time.Millisecond)
	}
	p, err := kafka.NewProducer(&pm)
	if err != nil {
		return nil, fmt.Errorf("statestore: create the changelog producer: %w", err)
	}
	go func() {
		for range p.Events() { // every append has its own delivery channel
		}
	}()
	go consumer.ForwardLogs(log.Named("librdkafka"), p.Logs())
	return p, nil
}

// appendEntry appends e to partition of changelog topic and waits for its
// acknowledgement, or for ctx.
func appendEntry(ctx context.Context, p *kafka.Producer, topic string, partition int32, e keystate.Entry, inFlight *sync.WaitGroup) error {
	a, err := sendEntry(p, topic, partition, e, inFlight)
	if err != nil {
		return err
	}
	return a.wait(ctx)
}

// pendingAppend is an append sent and not yet answered.
type pendingAppend struct {
	what     string // the key and the partition, for errors
	report   chan kafka.Event
	inFlight *sync.WaitGroup
}

// sendEntry hands e to the producer for partition of changelog topic.
// inFlight counts the append until its report comes, even if no one
// waits for it, so that a restore on this member of a range it overlaps
// can wait for it.
func sendEntry(p *kafka.Producer, topic string, partition int32, e keystate.Entry, inFlight *sync.WaitGroup) (*pendingAppend, error) {
	m := EntryMessage(topic, partition, e)
	a := &pendingAppend{what: fmt.Sprintf("the state of key %s to %s/%d", strconv.Quote(string(e.Key)), topic, partition), report: make(chan kafka.Event, 1), inFlight: inFlight}
	inFlight.Add(1)
	if err := p.Produce(m, a.report); err != nil {
		inFlight.Done()
		return nil, fmt.Errorf("statestore: append %s: %w", a.what, err)
	}
	return a, nil
}

// wait waits for a's acknowledgement, or for ctx: once ctx ends the
// append may still land, and stays counted until its report comes.
func (a *pendingAppend) wait(ctx context.Context) error {
	_, err := a.delivered(ctx)
	return err
}

// waitOffset is wait that also returns the offset the append landed at:
// an operator's deletion reads on from it for the owner's copy.
func (a *pendingAppend) waitOffset(ctx context.Context) (int64, error) {
	d, err := a.delivered(ctx)
	switch {
	case err != nil:
		return -1, err
	case d == nil:
		return -1, fmt.Errorf("statestore: append %s: the producer's report names no offset", a.what)
	}
	return int64(d.TopicPartition.Offset), nil
}

// delivered waits for a's report, and returns it when it is the record's
// delivery report.
func (a *pendingAppend) delivered(ctx context.Context) (*kafka.Message, error) {
	select {
	case ev := <-a.report:
		a.inFlight.Done()
		d, _ := ev.(*kafka.Message)
		if d != nil && d.TopicPartition.Error != nil {
			return nil, fmt.Errorf("statestore: append %s: %w", a.what, d.TopicPartition.Error)
		}
		return d, nil
	case <-ctx.Done():
		go func() {
			<-a.report
			a.inFlight.Done()
		}()
		return nil, ctx.Err()
	}
}

// ensureChangelogs makes sure every input topic's changelog exists with
// the input's partition count, creating the missing ones compacted, and
// refuses one with another partition count or that is not compacted.
func (s *Store) ensureChangelogs(ctx context.Context) error {
	a, err := kafka.NewAdminClientFromProducer(s.producer)
	if err != nil {
		return err
	}
	defer a.Close()
	names := slices.Clone(s.cfg.Topics)
	for _, t := range s.cfg.Topics {
		names = append(names, s.changelog[t])
	}
	counts, err := partitionCounts(ctx, a, names)
	if err != nil {
		return err
	}
	var create []kafka.TopicSpecification
	for _, t := range s.cfg.Topics {
		cl, n := s.changelog[t], counts[t]
		switch have := counts[cl]; {
		case n == 0:
			return fmt.Errorf("statestore: topic %q does not exist: create it, or fix Config.Topics", t)
		case have == 0:
			rf := s.cfg.ReplicationFactor
			if rf == 0 {
				rf = -1 // the broker's default.replication.factor
			}
			settings := map[string]string{
				"cleanup.policy":        "compact",
				"min.compaction.lag.ms": strconv.FormatInt(s.cfg.MinCompactionLag.Milliseconds(), 10),
			}
			if s.cfg.Dir != "" {
				// Copies rely on it (copies.go): not left to the broker.
				settings["delete.retention.ms"] = strconv.FormatInt(max(defaultDeleteRetention, 2*s.cfg.CopyMaxAge).Milliseconds(), 10)
			}
			create = append(create, kafka.TopicSpecification{Topic: cl, NumPartitions: int(n), ReplicationFactor: rf, Config: settings})
		case have != n:
			return fmt.Errorf("statestore: changelog %q has %d partitions and its topic %q has %d: a key's state lives in the changelog partition of its record's number; give the changelog %d partitions, or name another (Config.Changelog)", cl, have, t, n, n)
		default:
			if err := s.checkSettings(ctx, a, cl); err != nil {
				return err
			}
		}
	}
	if len(create) == 0 {
		return nil
	}
	res, err := a.CreateTopics(ctx, create)
	if err != nil {
		return fmt.Errorf("statestore: create changelog topics: %w", err)
	}
	for _, r := range res {
		if c := r.Error.Code(); c != kafka.ErrNoError && c != kafka.ErrTopicAlreadyExists {
			return fmt.Errorf("statestore: create changelog %q: %w", r.Topic, r.Error)
		}
		s.log.Info("created changelog topic", "topic", r.Topic)
	}
	return nil
}

// partitionCounts reads the partition counts of topics; a topic that does
// not exist is left out.
func partitionCounts(ctx context.Context, a *kafka.AdminClient, topics []string) (map[string]int32, error) {
	names := slices.Compact(slices.Sorted(slices.Values(topics)))
	res, err := a.DescribeTopics(ctx, kafka.NewTopicCollectionOfTopicNames(names))
	if err != nil {
		return nil, fmt.Errorf("statestore: describe topics %v: %w", names, err)
	}
	out := make(map[string]int32)
	for _, d := range res.TopicDescriptions {
		switch d.Error.Code() {
		case kafka.ErrNoError:
			out[d.Name] = int32(len(d.Partitions))
		case kafka.ErrUnknownTopicOrPart, kafka.ErrUnknownTopic:
		default:
			return nil, fmt.Errorf("statestore: describe topic %q: %w", d.Name, d.Error)
		}
	}
	return out, nil
}

// defaultDeleteRetention is Kafka's delete.retention.ms default.
const defaultDeleteRetention = 24 * time.Hour

// checkSettings refuses a changelog whose cleanup.policy does not compact
// (deleting by age would drop the state of every key not changed within
// the retention time) and, with the state on disk, one that keeps
// tombstones no longer than CopyMaxAge (a copy would outlive a tombstone
// after it: copies.go).
func (s *Store) checkSettings(ctx context.Context, a *kafka.AdminClient, topic string) error {
	res, err := a.DescribeConfigs(ctx, []kafka.ConfigResource{{Type: kafka.ResourceTopic, Name: topic}})
	if err != nil {
		return fmt.Errorf("statestore: read the settings of changelog %q: %w", topic, err)
	}
	if len(res) != 1 {
		return errors.New("statestore: DescribeConfigs answered for no topic")
	}
	policy := res[0].Config["cleanup.policy"].Value
	if !slices.Contains(strings.Split(policy, ","), "compact") {
		return fmt.Errorf("statestore: changelog %q has cleanup.policy %q: it must be compact, or keys not changed within its retention lose their state; set it with kafka-configs --alter --add-config cleanup.policy=compact", topic, policy)
	}
	if s.cfg.Dir == "" {
		return nil
	}
	keep := defaultDeleteRetention // a broker that names none keeps Kafka's default
	if v := res[0].Config["delete.retention.ms"].Value; v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("statestore: changelog %q has delete.retention.ms %q, not a number of milliseconds", topic, v)
		}
		keep = time.Duration(ms) * time.Millisecond
	}
	if s.cfg.CopyMaxAge >= keep {
		return fmt.Errorf("statestore: changelog %q keeps tombstones for %s (delete.retention.ms), not longer than CopyMaxAge %s: a range's copy on disk could outlive a deletion; lower CopyMaxAge, or raise delete.retention.ms with kafka-configs --alter --add-config delete.retention.ms=<ms> (two days: 172800000)", topic, keep, s.cfg.CopyMaxAge)
	}
	return nil
}
