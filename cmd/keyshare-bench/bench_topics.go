package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/consumer/kafkaoffsets"
)

// benchTopics are one row's topics on kfake, with a producer that writes
// records to every partition and keeps each partition's end offset.
type benchTopics struct {
	admin    *kafka.AdminClient
	prod     *kafka.Producer
	topics   map[string]int32
	ends     map[assign.TopicPartition]int64
	produced int
}

func newBenchTopics(ctx context.Context, brokers string, topics map[string]int32) (*benchTopics, error) {
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": brokers, "log_level": 3})
	if err != nil {
		return nil, err
	}
	var specs []kafka.TopicSpecification
	for t, n := range topics {
		specs = append(specs, kafka.TopicSpecification{Topic: t, NumPartitions: int(n), ReplicationFactor: 1})
	}
	if _, err := admin.CreateTopics(ctx, specs); err != nil {
		admin.Close()
		return nil, err
	}
	bt := &benchTopics{admin: admin, topics: topics, ends: make(map[assign.TopicPartition]int64)}
	bt.prod, err = kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": brokers, "linger.ms": 5, "log_level": 3, "go.delivery.reports": false})
	if err != nil {
		bt.close()
		return nil, err
	}
	return bt, nil
}

// produceEach writes per records to every partition and waits for them.
func (bt *benchTopics) produceEach(per int) {
	for t, n := range bt.topics {
		for part := range n {
			for range per {
				topic := t
				for bt.prod.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: part}, Key: []byte(strconv.Itoa(bt.produced)), Value: []byte("x")}, nil) != nil {
					time.Sleep(time.Millisecond)
				}
				bt.produced++
				bt.ends[assign.TopicPartition{Topic: t, Partition: part}]++
			}
		}
	}
	bt.prod.Flush(30000)
}

// close deletes the topics: kfake keeps two files open per partition, and
// without deleting each row's topics the rows of a full run (21,568 files)
// exceed the process's 20,000 open files by P = 4,096, M = 16.
func (bt *benchTopics) close() {
	if bt.prod != nil {
		bt.prod.Close()
	}
	names := make([]string, 0, len(bt.topics))
	for t := range bt.topics {
		names = append(names, t)
	}
	dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := bt.admin.DeleteTopics(dctx, names); err != nil {
		fmt.Fprintf(os.Stderr, "keyshare-bench: delete topics %v: %v\n", names, err)
	}
	bt.admin.Close()
}

// endChecker tells whether a group's committed offsets have reached the
// end offsets the bench produced to (ends, which the bench grows as it
// produces). kc is a client of the group that never subscribes.
//
// Committed offsets only grow, so a check asks Kafka only for the
// partitions not yet seen at their end (in requests of
// kafkaoffsets.Chunk): at P = 4,096 asking for all of them every 50 ms, in
// one request, took CPU from the leave being timed.
type endChecker struct {
	kc    *kafka.Consumer
	ends  map[assign.TopicPartition]int64
	atEnd map[assign.TopicPartition]int64 // the end each was last seen committed at
}

func (e *endChecker) reached() bool {
	if e.atEnd == nil {
		e.atEnd = make(map[assign.TopicPartition]int64)
	}
	var ask []assign.TopicPartition
	for tp, end := range e.ends {
		if e.atEnd[tp] != end {
			ask = append(ask, tp)
		}
	}
	if len(ask) == 0 {
		return true
	}
	got, _, err := kafkaoffsets.Committed(e.kc, ask, 10000)
	if err != nil {
		return false
	}
	for tp, o := range got {
		if o == e.ends[tp] {
			e.atEnd[tp] = o
		}
	}
	return len(got) == len(ask) && !slices.ContainsFunc(ask, func(tp assign.TopicPartition) bool { return e.atEnd[tp] != e.ends[tp] })
}

// leaveTimes is how long one leave (or kill) took to be made good: until
// the partitions the member held are committed at their new end (moved),
// and until every partition is (all). Both also wait until every
// partition is held by a remaining member. The scale goal for a leave is
// about the moved ranges (docs/benchmarks.md); all adds the commit of the
// records produced at the signal on partitions that did not move, whose
// own goal is the commit delay.
type leaveTimes struct{ moved, all time.Duration }

// timeLeave waits, from start, for the two ends of leaveTimes. ends is the
// bench's end offsets after the records produced at the signal; moved the
// partitions the leaving member held; held tells whether every partition
// is held by a remaining member.
func timeLeave(ctx context.Context, start time.Time, kc *kafka.Consumer, ends map[assign.TopicPartition]int64, moved []assign.TopicPartition, held func() bool) (leaveTimes, error) {
	movedEnds := make(map[assign.TopicPartition]int64, len(moved))
	for _, tp := range moved {
		movedEnds[tp] = ends[tp]
	}
	movedAtEnd := (&endChecker{kc: kc, ends: movedEnds}).reached
	allAtEnd := (&endChecker{kc: kc, ends: ends}).reached
	var t leaveTimes
	isHeld := false
	_, err := waitUntil(ctx, 5*time.Minute, 50*time.Millisecond, func() bool {
		if isHeld = isHeld || held(); !isHeld {
			return false
		}
		if t.moved == 0 {
			if !movedAtEnd() {
				return false
			}
			t.moved = time.Since(start)
		}
		return allAtEnd()
	})
	if err != nil {
		return t, fmt.Errorf("moved partitions committed after %s, all: %w", t.moved, err)
	}
	t.all = time.Since(start)
	return t, nil
}
