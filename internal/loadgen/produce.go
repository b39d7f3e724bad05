package loadgen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Produce writes count records and waits for their acks. Each value is
// "key-K:SEQ", SEQ counting that key's records from 0, so that order can be
// checked downstream. It returns how many were acknowledged.
func Produce(ctx context.Context, brokers, topic string, count, keys int, zipf, rate float64, progress bool) (int, error) {
	return ProduceWith(ctx, kafka.ConfigMap{"bootstrap.servers": brokers, "acks": "all", "enable.idempotence": true, "linger.ms": 5, "log_level": 3},
		topic, count, keys, zipf, rate, progress)
}

// ProduceWith is Produce with a full producer configuration.
func ProduceWith(ctx context.Context, cm kafka.ConfigMap, topic string, count, keys int, zipf, rate float64, progress bool) (int, error) {
	p, err := kafka.NewProducer(&cm)
	if err != nil {
		//lint:ignore ST1005 Kafka is a proper noun
		return 0, fmt.Errorf("Kafka producer: %w", err)
	}
	defer p.Close()
	if err := checkTopic(p, topic); err != nil {
		return 0, err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var z *rand.Zipf
	if zipf > 0 {
		z = rand.NewZipf(rng, zipf, 1, uint64(keys-1))
	}
	seq := make([]int, keys)
	acked, failed := 0, 0
	var firstErr error
	reports := make(chan kafka.Event, 10000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range count {
			m := (<-reports).(*kafka.Message)
			if m.TopicPartition.Error != nil {
				failed++
				if firstErr == nil {
					firstErr = m.TopicPartition.Error
				}
				continue
			}
			acked++
		}
	}()
	start := time.Now()
	lastShown := -1
	for i := 0; i < count; i++ {
		if ctx.Err() != nil {
			count = i
			break
		}
		k := rng.IntN(keys)
		if z != nil {
			k = int(z.Uint64())
		}
		msg := &kafka.Message{
			TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
			Key:            fmt.Appendf(nil, "key-%d", k),
			Value:          fmt.Appendf(nil, "key-%d:%d", k, seq[k]),
		}
		seq[k]++
		for {
			err := p.Produce(msg, reports)
			if err == nil {
				break
			}
			if e, ok := err.(kafka.Error); ok && e.Code() == kafka.ErrQueueFull {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			return acked, err
		}
		if rate > 0 {
			if ahead := time.Duration(float64(i+1)/rate*float64(time.Second)) - time.Since(start); ahead > 0 {
				time.Sleep(ahead)
			}
		}
		if progress && count >= 1000 {
			if pct := (i + 1) * 20 / count; pct != lastShown {
				lastShown = pct
				fmt.Fprintf(os.Stderr, "\r[%-20s] %d/%d", bar(pct), i+1, count)
			}
		}
	}
	if progress && count >= 1000 {
		fmt.Fprintln(os.Stderr)
	}
	for p.Flush(1000) > 0 && ctx.Err() == nil {
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		return acked, fmt.Errorf("delivery reports missing after 30s")
	}
	if failed > 0 {
		return acked, fmt.Errorf("%d records failed: %w", failed, firstErr)
	}
	return acked, nil
}

func bar(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = '#'
	}
	return string(b)
}

// checkTopic fails with a clear message if topic does not exist or the
// brokers cannot be reached.
func checkTopic(p *kafka.Producer, topic string) error {
	md, err := p.GetMetadata(&topic, false, 10000)
	if err != nil {
		return fmt.Errorf("cannot read metadata from the brokers within 10s: %w; check --brokers", err)
	}
	if tm, ok := md.Topics[topic]; !ok || tm.Error.Code() != kafka.ErrNoError || len(tm.Partitions) == 0 {
		return fmt.Errorf("topic %q does not exist; create it (keyshare cluster --topic %s:3)", topic, topic)
	}
	return nil
}
