package admin_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

// BenchmarkParkedKey measures, on one partition with one member, the cost
// of parking a record (a produce to the parking topic, the key's copies
// in its order with several on their way at once, and its ack before the
// record counts done) against handling it with a no-op handler,
// and how fast the other keys' records are handled while one of eight
// keys is parked, against none. Each iteration is a new group reading the
// same records from the start. Run with:
//
//	go test -run '^$' -bench BenchmarkParkedKey -benchtime 3x ./admin/
//	KEYSHARE_KAFKA=apache go test -run '^$' -bench BenchmarkParkedKey -benchtime 3x ./admin/
//
// ns/record counts from the member's start until the group's commit
// covers every record (the join, about a second, included alike in each
// case); others-records/s counts the other keys' records between the
// first record handled and the last of theirs.
func BenchmarkParkedKey(b *testing.B) {
	cli, e := testutil.StartEtcd(b)
	k := testutil.StartKafka(b, map[string]int32{"one": 1, "eight": 1})
	testutil.Produce(b, k.Brokers, "one", testutil.KeyedRecords(2000, 1))
	testutil.Produce(b, k.Brokers, "eight", testutil.KeyedRecords(16000, 8))
	run := 0
	for _, tc := range []struct {
		name, topic string
		records     int64
		park        string
	}{
		{"one-key-handled", "one", 2000, ""},
		{"one-key-parked", "one", 2000, "key-0"},
		{"8-keys-none-parked", "eight", 16000, ""},
		{"8-keys-1-parked", "eight", 16000, "key-3"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var total time.Duration
			var othersRate float64
			for b.Loop() {
				run++
				group := fmt.Sprintf("g%d", run)
				if tc.park != "" {
					// A park needs the group's ranges: set it on a group
					// with a member, stopped again before the timed run.
					g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}, "/keyshare", group)
					if err != nil {
						b.Fatal(err)
					}
					stop := benchMember(b, e.Endpoints, k.Brokers, group, tc.topic, func(context.Context, *kafka.Message) error { return context.Canceled })
					q := admin.KeyQuery{Topic: tc.topic, Key: []byte(tc.park), Partition: 0, MaxScan: 1}
					for {
						if _, err := g.ParkKey(b.Context(), admin.ParkRequest{KeyQuery: q, ParkTopic: fmt.Sprintf("parked-%d", run)}); err == nil {
							break
						}
						time.Sleep(100 * time.Millisecond)
					}
					stop()
					g.Close()
				}
				var mu sync.Mutex
				var first, lastOther time.Time
				others := 0
				start := time.Now()
				stop := benchMember(b, e.Endpoints, k.Brokers, group, tc.topic, func(_ context.Context, m *kafka.Message) error {
					now := time.Now()
					mu.Lock()
					if first.IsZero() {
						first = now
					}
					if string(m.Key) != tc.park {
						others++
						lastOther = now
					}
					mu.Unlock()
					return nil
				})
				for testutil.Committed(b, k.Brokers, group, tc.topic, 1)[0] < tc.records {
					time.Sleep(20 * time.Millisecond)
				}
				total += time.Since(start)
				stop()
				mu.Lock()
				if others > 0 {
					othersRate += float64(others) / lastOther.Sub(first).Seconds()
				}
				mu.Unlock()
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(int64(b.N)*tc.records), "ns/record")
			if tc.topic == "eight" {
				b.ReportMetric(othersRate/float64(b.N), "others-records/s")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// benchMember runs a member of group on topic until stop is called.
func benchMember(b *testing.B, etcd []string, brokers, group, topic string, h consumer.Handler) (stop func()) {
	cfg := consumer.DefaultConfig()
	cfg.Group, cfg.Topics, cfg.MemberID, cfg.Handler = group, []string{topic}, "m1", h
	cfg.Kafka = kafka.ConfigMap{"bootstrap.servers": brokers, "log_level": 3, "fetch.wait.max.ms": 50}
	cfg.SessionTTL, cfg.FlushInterval, cfg.CommitInterval, cfg.RebalanceDebounce = 2*time.Second, 100*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
	cfg.DrainTimeout = time.Second
	c, err := consumer.New(testutil.NewEtcdClient(b, etcd), cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return func() { cancel(); <-done }
}
