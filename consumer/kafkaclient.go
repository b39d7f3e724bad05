package consumer

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// kafkaDefaults are the librdkafka settings keyshare gives its consumer
// unless Config.Kafka sets them.
//
// fetch.queue.backoff.ms: once librdkafka's queue holds
// queued.min.messages records (100,000), it stops fetching a partition
// for this long, 1 s by default. A member that drains the queue in less
// than that then waits for the rest of the second: on one partition of
// small records on Apache Kafka, a bare poll loop read 130,000 records/s
// with the default and 507,000–636,000 with 10–50 ms, as fast as with
// queued.min.messages raised tenfold, and a member read 105,000 and
// 163,000–174,000 (docs/benchmarks.md, section 0). The queue's bounds, and so
// librdkafka's memory, stay as they are; the broker sees no more fetches
// per record. The cost is the client's: while the queue stays full and the
// partitions are not paused (keyshare pauses them after pauseAfter at its
// in-flight bound), librdkafka looks at each partition every 50 ms instead
// of every second.
var kafkaDefaults = kafka.ConfigMap{
	"fetch.queue.backoff.ms": 50,
}

// kafkaConfig is the librdkafka configuration of the member's consumer:
// Config.Kafka, the settings keyshare controls, and keyshare's defaults
// (kafkaDefaults) for what Config.Kafka leaves unset.
//
// librdkafka's own defaults stand for the rest, fetch.wait.max.ms (500 ms)
// among them. keyshare set it to 100 ms for a while, so that a partition
// taken over was fetched sooner (librdkafka keeps one fetch in flight per
// broker, and the broker holds a fetch that finds nothing new that long).
// On kfake that shortened some leaves at P = 4,096; on Apache Kafka it
// did not, and the broker's CPU at idle with a 4,096-partition group went
// from 0.13–0.15 of a core to 0.37–0.57 (librdkafka sends the whole
// partition list in every fetch; docs/benchmarks.md).
func kafkaConfig(cfg Config) kafka.ConfigMap {
	cm := kafka.ConfigMap{}
	for k, v := range cfg.Kafka {
		cm[k] = v
	}
	for k, v := range kafkaDefaults {
		if _, set := cm[k]; !set {
			cm[k] = v
		}
	}
	cm["group.id"] = cfg.Group
	cm["enable.auto.commit"] = false
	cm["enable.auto.offset.store"] = false
	cm["auto.offset.reset"] = "error"
	cm["enable.partition.eof"] = true // the end of the log moves the ledger past markers (gaps.go)
	cm["go.logs.channel.enable"] = true
	return cm
}

func (c *Consumer) openKafka(ctx context.Context) error {
	cm := kafkaConfig(c.cfg)
	kc, err := kafka.NewConsumer(&cm)
	if err != nil {
		return fmt.Errorf("consumer: create Kafka consumer: %w", err)
	}
	c.kc = kc
	c.logsDone = make(chan struct{})
	go func() {
		defer close(c.logsDone)
		ForwardLogs(c.log.Named("librdkafka"), kc.Logs())
	}()
	sctx, stop := c.watchRefusals(ctx)
	err = c.checkTopics(sctx)
	if err == nil {
		err = c.checkPlainGroup(sctx)
	}
	stop()
	if err != nil {
		c.closeKafka()
		return err
	}
	if c.cfg.DeadLetterTopic != "" {
		p, logsDone, err := newDeadLetterProducer(c.cfg.Kafka, c.log.Named("librdkafka").Named("dlq"))
		if err != nil {
			c.closeKafka()
			return err
		}
		c.dlq, c.dlqLogs = p, logsDone
		c.deadLetters = c.newDeadLetterWriter(p)
	}
	return nil
}

func (c *Consumer) closeKafka() {
	c.closeParking()
	if c.dlq != nil {
		c.dlq.Flush(5000)
		c.dlq.Close() // closes the log channel
		<-c.dlqLogs
		c.dlq, c.deadLetters = nil, nil
	}
	if c.kc != nil {
		_ = c.kc.Close() // closes the log channel
		<-c.logsDone
		c.kc = nil
	}
}

// watchRefusals reads the Kafka consumer's events while the member starts
// (nothing else polls it yet), and cancels the returned context with a
// refused login when librdkafka reports one: the requests the start
// makes only wait for the broker until their timeout, while the refusal
// arrives at once as an event. stop ends the watch and waits for it.
func (c *Consumer) watchRefusals(ctx context.Context) (sctx context.Context, stop func()) {
	sctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var seen refusals
		for sctx.Err() == nil {
			ke, ok := c.kc.Poll(100).(kafka.Error)
			if !ok {
				continue
			}
			if err := seen.add(ke); err != nil {
				cancel(fmt.Errorf("consumer: Kafka brokers %v refused this client: %w", c.cfg.Kafka["bootstrap.servers"], err))
				return
			}
			c.log.Debug("kafka", "error", ke)
		}
	}()
	return sctx, func() {
		cancel(nil)
		<-done
	}
}

// checkTopics makes sure every topic (and the dead-letter topic) exists:
// one Metadata request, retried until Kafka answers (retry.go). A topic
// Kafka says does not exist ends the start.
func (c *Consumer) checkTopics(ctx context.Context) error {
	topics := c.cfg.Topics
	if c.cfg.DeadLetterTopic != "" {
		topics = append(slices.Clip(topics), c.cfg.DeadLetterTopic)
	}
	return c.retry(ctx, "read the topics' metadata from Kafka", func(ctx context.Context) error {
		counts, err := c.partitionCounts(ctx, topics)
		if err != nil {
			return err
		}
		for _, t := range c.cfg.Topics {
			if counts[t] <= 0 {
				return final(fmt.Errorf("consumer: topic %q does not exist on %v: create it, or fix Config.Topics", t, c.cfg.Kafka["bootstrap.servers"]))
			}
		}
		if t := c.cfg.DeadLetterTopic; t != "" && counts[t] <= 0 {
			return final(fmt.Errorf("consumer: dead-letter topic %q does not exist: create it, or fix Config.DeadLetterTopic", t))
		}
		return checkCoPartitionCounts(c.cfg.CoPartitioned, counts)
	})
}

// checkCoPartitionCounts refuses a co-partitioned set whose topics'
// partition counts differ: their partition p would not hold the same keys.
func checkCoPartitionCounts(sets [][]string, counts map[string]int32) error {
	for _, set := range sets {
		for _, t := range set[1:] {
			if counts[t] != counts[set[0]] {
				return final(fmt.Errorf("consumer: co-partitioned topics %q (%d partitions) and %q (%d) have different partition counts: a key's records would be in different partition numbers; give them the same count, or remove the set from Config.CoPartitioned",
					set[0], counts[set[0]], t, counts[t]))
			}
		}
	}
	return nil
}

// partitionCounts reads the topics' partition counts from Kafka: one
// Metadata request for these topics (DescribeTopics), not for every topic
// of the cluster. The leader reads them every PartitionRefresh, and a
// cluster with thousands of topics would answer a request for all of them
// with all their partitions each time. A topic that does not exist is left
// out; any other trouble with a topic is an error (explainKafka says
// whether a retry can fix it).
func (c *Consumer) partitionCounts(ctx context.Context, topics []string) (map[string]int32, error) {
	timeout := c.cfg.StartTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	descs, err := c.describeTopics(dctx, topics, kafka.SetAdminRequestTimeout(timeout))
	if err != nil {
		return nil, fmt.Errorf("consumer: read Kafka metadata from %v within %s: %w", c.cfg.Kafka["bootstrap.servers"], timeout.Round(100*time.Millisecond), err)
	}
	out := make(map[string]int32)
	for _, d := range descs {
		if len(d.Partitions) > 0 {
			out[d.Name] = int32(len(d.Partitions))
		}
	}
	return out, nil
}

// describeTopics describes topics in one Metadata request (a name given
// twice is asked once: librdkafka refuses it) and returns the descriptions
// of the topics that exist: partition counts and topic ids both come from
// here. A topic Kafka answers with another error than "unknown topic"
// (LEADER_NOT_AVAILABLE while a broker starts, TOPIC_AUTHORIZATION_FAILED)
// makes it an error, not a missing topic.
func (c *Consumer) describeTopics(ctx context.Context, topics []string, opts ...kafka.DescribeTopicsAdminOption) ([]kafka.TopicDescription, error) {
	a, err := kafka.NewAdminClientFromConsumer(c.kc)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	names := slices.Compact(slices.Sorted(slices.Values(topics)))
	res, err := a.DescribeTopics(ctx, kafka.NewTopicCollectionOfTopicNames(names), opts...)
	if err != nil {
		return nil, explainKafka(err)
	}
	descs := res.TopicDescriptions[:0]
	for _, d := range res.TopicDescriptions {
		switch d.Error.Code() {
		case kafka.ErrNoError:
			descs = append(descs, d)
		case kafka.ErrUnknownTopicOrPart, kafka.ErrUnknownTopic:
		default:
			return nil, fmt.Errorf("topic %q: %w", d.Name, explainKafka(d.Error))
		}
	}
	return descs, nil
}
