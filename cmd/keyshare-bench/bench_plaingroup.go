package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/assign"
)

// plainGroupLeave times, for comparison, the leave the member-process rows
// time, in a plain Kafka consumer group on the same librdkafka, broker and
// machine: m consumers (cooperative-sticky assignment, auto commit every
// second as keyshare's CommitInterval, librdkafka's other defaults as
// keyshare's members) share P partitions over the same topics; once every
// record is committed, one consumer closes (leaving the group, its partitions
// revoked and its offsets committed) with one new record per partition
// produced at once, and the figures are the time
// until every partition is assigned to a remaining consumer and the
// closing consumer's partitions (moved), or all partitions, are committed
// at their new end (timeLeave). The consumers run in the bench process.
func (c *benchCommand) plainGroupLeave(ctx context.Context, p, m int) (leaveTimes, error) {
	var none leaveTimes
	group := fmt.Sprintf("pg-%d-%d-%d", p, m, c.groups.Add(1))
	topics := topicsFor(group, p)
	bt, err := newBenchTopics(ctx, c.brokers, topics)
	if err != nil {
		return none, err
	}
	defer bt.close()
	bt.produceEach(4)
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	g := &plainGroup{}
	defer g.stopAll()
	for range m {
		if err := g.join(c.brokers, group, names); err != nil {
			return none, err
		}
	}

	kc, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": c.brokers, "group.id": group, "log_level": 3})
	if err != nil {
		return none, err
	}
	defer kc.Close()
	committedAtEnd := (&endChecker{kc: kc, ends: bt.ends}).reached
	if _, err := waitUntil(ctx, 5*time.Minute, 50*time.Millisecond, func() bool { return g.consumed.Load() >= int64(bt.produced) }); err != nil {
		return none, fmt.Errorf("consumed %d of %d: %w", g.consumed.Load(), bt.produced, err)
	}
	if _, err := waitUntil(ctx, 5*time.Minute, 50*time.Millisecond, committedAtEnd); err != nil {
		return none, fmt.Errorf("commit: %w", err)
	}

	leaver := g.cs[len(g.cs)-1]
	moved, err := assignedTo(leaver.kc)
	if err != nil {
		return none, err
	}
	start := time.Now()
	g.cs = g.cs[:len(g.cs)-1]
	var closed sync.WaitGroup
	closed.Go(leaver.close)
	defer closed.Wait()
	bt.produceEach(1)
	t, err := timeLeave(ctx, start, kc, bt.ends, moved, func() bool { return g.assigned() == p })
	if err != nil {
		return none, fmt.Errorf("leave: %w", err)
	}
	return t, nil
}

// plainGroup is the plain consumers of one plainGroupLeave, polling in the
// bench process.
type plainGroup struct {
	consumed atomic.Int64 // records polled by all of them
	cs       []*plainConsumer
}

// plainConsumer is one consumer of a plainGroup and its poll loop.
type plainConsumer struct {
	kc   *kafka.Consumer
	stop chan struct{}
	done chan struct{} // closed once the loop has closed kc
}

// join adds a consumer of group subscribed to topics, and starts its poll
// loop.
func (g *plainGroup) join(brokers, group string, topics []string) error {
	kc, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers":             brokers,
		"group.id":                      group,
		"partition.assignment.strategy": "cooperative-sticky",
		"enable.auto.commit":            true,
		"auto.commit.interval.ms":       1000,
		"auto.offset.reset":             "earliest",
		"log_level":                     3,
	})
	if err != nil {
		return err
	}
	if err := kc.SubscribeTopics(topics, nil); err != nil {
		kc.Close()
		return err
	}
	pc := &plainConsumer{kc: kc, stop: make(chan struct{}), done: make(chan struct{})}
	g.cs = append(g.cs, pc)
	go func() {
		defer close(pc.done)
		defer pc.kc.Close() // leaves the group; commits what was consumed
		for {
			select {
			case <-pc.stop:
				return
			default:
			}
			if _, ok := pc.kc.Poll(100).(*kafka.Message); ok {
				g.consumed.Add(1)
			}
		}
	}()
	return nil
}

// close stops the consumer's loop, which closes it, and waits for it.
func (pc *plainConsumer) close() {
	close(pc.stop)
	<-pc.done
}

// stopAll closes every consumer still in the group.
func (g *plainGroup) stopAll() {
	for _, pc := range g.cs {
		pc.close()
	}
}

// assigned is how many partitions the group's consumers hold; 0 when one
// of them cannot say.
func (g *plainGroup) assigned() int {
	n := 0
	for _, pc := range g.cs {
		a, err := pc.kc.Assignment()
		if err != nil {
			return 0
		}
		n += len(a)
	}
	return n
}

// assignedTo is the partitions kc holds.
func assignedTo(kc *kafka.Consumer) ([]assign.TopicPartition, error) {
	held, err := kc.Assignment()
	if err != nil {
		return nil, err
	}
	moved := make([]assign.TopicPartition, 0, len(held))
	for _, tp := range held {
		moved = append(moved, assign.TopicPartition{Topic: *tp.Topic, Partition: tp.Partition})
	}
	return moved, nil
}
