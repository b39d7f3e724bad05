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

	var consumed atomic.Int64
	type plain struct {
		kc   *kafka.Consumer
		stop chan struct{}
		done chan struct{}
	}
	var cs []*plain
	defer func() {
		for _, pc := range cs {
			if pc != nil {
				close(pc.stop)
				<-pc.done
			}
		}
	}()
	for range m {
		kc, err := kafka.NewConsumer(&kafka.ConfigMap{
			"bootstrap.servers":             c.brokers,
			"group.id":                      group,
			"partition.assignment.strategy": "cooperative-sticky",
			"enable.auto.commit":            true,
			"auto.commit.interval.ms":       1000,
			"auto.offset.reset":             "earliest",
			"log_level":                     3,
		})
		if err != nil {
			return none, err
		}
		if err := kc.SubscribeTopics(names, nil); err != nil {
			kc.Close()
			return none, err
		}
		pc := &plain{kc: kc, stop: make(chan struct{}), done: make(chan struct{})}
		cs = append(cs, pc)
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
					consumed.Add(1)
				}
			}
		}()
	}

	ends := bt.ends
	kc, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": c.brokers, "group.id": group, "log_level": 3})
	if err != nil {
		return none, err
	}
	defer kc.Close()
	committedAtEnd := (&endChecker{kc: kc, ends: ends}).reached
	if _, err := waitUntil(ctx, 5*time.Minute, 50*time.Millisecond, func() bool { return consumed.Load() >= int64(bt.produced) }); err != nil {
		return none, fmt.Errorf("consumed %d of %d: %w", consumed.Load(), bt.produced, err)
	}
	if _, err := waitUntil(ctx, 5*time.Minute, 50*time.Millisecond, committedAtEnd); err != nil {
		return none, fmt.Errorf("commit: %w", err)
	}

	leaver := cs[len(cs)-1]
	held, err := leaver.kc.Assignment()
	if err != nil {
		return none, err
	}
	moved := make([]assign.TopicPartition, 0, len(held))
	for _, tp := range held {
		moved = append(moved, assign.TopicPartition{Topic: *tp.Topic, Partition: tp.Partition})
	}
	start := time.Now()
	cs = cs[:len(cs)-1]
	var closed sync.WaitGroup
	closed.Go(func() {
		close(leaver.stop)
		<-leaver.done
	})
	defer closed.Wait()
	bt.produceEach(1)
	assignedAll := func() bool {
		n := 0
		for _, pc := range cs {
			a, err := pc.kc.Assignment()
			if err != nil {
				return false
			}
			n += len(a)
		}
		return n == p
	}
	t, err := timeLeave(ctx, start, kc, ends, moved, assignedAll)
	if err != nil {
		return none, fmt.Errorf("leave: %w", err)
	}
	return t, nil
}
