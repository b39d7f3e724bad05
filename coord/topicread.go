package coord

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/keyshare/keyshare/assign"
)

// The leader's reads of Kafka's view of the group's topics, off the
// assignment loop.
//
// Partition counts and topic ids come from Kafka, and a metadata read of
// thousands of partitions takes a while on a loaded machine: at P = 4,096
// the scale bench saw one take 730 ms while a member left. The assignment
// loop used to read them itself whenever PartitionRefresh had passed, so
// the round that reacted to a leave, after a quiet spell, paid for the
// read first, and the leaving member's handoff plan came that much later.
// A reader goroutine now reads them every PartitionRefresh and pokes the
// loop with each answer; rounds plan on the last answer and never wait for
// Kafka. Planning on counts a few seconds old is what the loop did between
// refreshes anyway: a partition added since is assigned a read later.

// topicRead is one read of Kafka's view of the group's topics.
type topicRead struct {
	at      time.Time                // when it was read (monotonic); zero: no read yet
	parts   []assign.PartitionWeight // every partition of the topics Kafka counts, sorted
	missing []string                 // topics Kafka gave no count for, sorted
	ids     map[string]string        // Kafka's topic ids (Config.TopicIDs); nil if not read
}

// topicReader reads topicReads until its context ends; done is closed then.
type topicReader struct {
	mu   sync.Mutex
	last topicRead
	done chan struct{}
}

// kafkaReadTimeout bounds one read of partition counts or topic ids.
const kafkaReadTimeout = 30 * time.Second

// startTopicReader reads at once, then every PartitionRefresh (every
// second while reads fail), and calls poke after each read that succeeds.
func (s *Session) startTopicReader(ctx context.Context, poke func()) *topicReader {
	r := &topicReader{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			wait := s.cfg.PartitionRefresh
			if read, ok := s.readTopics(ctx); ok {
				r.mu.Lock()
				r.last = read
				r.mu.Unlock()
				poke()
			} else {
				wait = min(wait, time.Second)
			}
			if sleep(ctx, wait) != nil {
				return
			}
		}
	}()
	return r
}

// latest is the last successful read (zero if none yet).
func (r *topicReader) latest() topicRead {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// readTopics reads the partition counts and, if Config.TopicIDs is set,
// the topic ids. Without counts there is no read; without ids the read
// has none and recreated topics are not detected until the next one. A
// topic Kafka gives no count for is missing: the leader plans only the
// partitions it read, so the ranges of a missing topic are neither
// reassigned nor deleted on the basis of a failed read, and one missing
// topic does not hold back the others.
func (s *Session) readTopics(ctx context.Context) (topicRead, bool) {
	rctx, cancel := context.WithTimeout(ctx, kafkaReadTimeout)
	defer cancel()
	counts, err := s.cfg.Partitions(rctx, s.cfg.Topics)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Error("read partition counts; assigning by the last counts read, if any", "error", err)
		}
		return topicRead{}, false
	}
	read := topicRead{}
	for _, t := range s.cfg.Topics {
		n, ok := counts[t]
		if !ok || n <= 0 {
			read.missing = append(read.missing, t)
			continue
		}
		for p := range n {
			read.parts = append(read.parts, assign.PartitionWeight{TopicPartition: assign.TopicPartition{Topic: t, Partition: p}})
		}
	}
	slices.SortFunc(read.parts, func(a, b assign.PartitionWeight) int { return assign.CompareTP(a.TopicPartition, b.TopicPartition) })
	slices.Sort(read.missing)
	read.missing = slices.Compact(read.missing)
	if s.cfg.TopicIDs != nil {
		ids, err := s.cfg.TopicIDs.IDs(rctx, s.cfg.Topics)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("read topic ids; recreated topics are not detected until the next read", "error", err)
			}
		} else {
			read.ids = ids
		}
	}
	read.at = time.Now()
	return read, true
}
