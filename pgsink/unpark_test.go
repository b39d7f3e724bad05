package pgsink_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

// TestUnparkThroughSink: a key is parked, three of its records are
// parked, then it is unparked. The unpark's prelude hands each parked
// record to the sink's handler with the fence of the range that holds
// the key, so each is applied once, in order, with no dead-letter topic
// to hide a refusal. With the sink's Handler and its BatchHandler.
func TestUnparkThroughSink(t *testing.T) {
	testutil.ParallelOnKfake(t)
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			g := newGroup(t, "unpark_")
			g.createTables()
			s := g.sink(false)
			g.startWith("a", func(c *consumer.Config) {
				if batch {
					c.Handler, c.BatchHandler = nil, s.BatchHandler(g.keyEffect("a"))
				} else {
					c.Handler = s.Handler(g.keyEffect("a"))
				}
				c.Retry = consumer.RetryPolicy{MaxAttempts: 3, Backoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
			}, time.Second)
			testutil.Produce(t, g.brokers, "orders", []testutil.Record{{Key: []byte("other"), Value: []byte("other:0")}})
			testutil.WaitFor(t, "the first record applied", 30*time.Second, func() bool {
				return g.count("SELECT count(*) FROM "+g.prefix+"effects WHERE key = 'other'") == 1
			})
			adm, err := admin.Open(g.etcd, kafka.ConfigMap{"bootstrap.servers": g.brokers, "log_level": 3}, "/keyshare", "g")
			if err != nil {
				t.Fatal(err)
			}
			defer adm.Close()
			q := admin.KeyQuery{Topic: "orders", Key: []byte("k"), Partition: 0}
			if _, err := adm.ParkKey(t.Context(), admin.ParkRequest{KeyQuery: q, By: "ops@test"}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(1500 * time.Millisecond) // the member learns of the park
			testutil.Produce(t, g.brokers, "orders", []testutil.Record{
				{Key: []byte("k"), Value: []byte("k:1")}, {Key: []byte("k"), Value: []byte("k:2")}, {Key: []byte("k"), Value: []byte("k:3")},
			})
			testutil.WaitFor(t, "k's records parked (the commit past them)", 30*time.Second, func() bool {
				return testutil.Committed(t, g.brokers, "g", "orders", 1)[0] == 4
			})
			if n := g.count("SELECT count(*) FROM " + g.prefix + "effects WHERE key = 'k'"); n != 0 {
				t.Fatalf("%d effects of k while it is parked; want none", n)
			}
			if _, err := adm.UnparkKey(t.Context(), admin.UnparkRequest{KeyQuery: q, By: "ops@test"}); err != nil {
				t.Fatal(err)
			}
			testutil.WaitFor(t, "k's parked records applied", 30*time.Second, func() bool {
				return g.count("SELECT count(*) FROM "+g.prefix+"effects WHERE key = 'k'") == 3
			})
			testutil.WaitFor(t, "the unpark done", 30*time.Second, func() bool {
				ops, err := adm.KeyOps(t.Context())
				return err == nil && len(ops) == 0
			})
			rows, offsets, outOfOrder := g.check()
			if rows != 4 || offsets != 4 || outOfOrder != 0 {
				t.Errorf("effects: %d rows of %d offsets, %d out of order; want 4, once each, in order", rows, offsets, outOfOrder)
			}
			if st := s.Stats(); st.Fenced != 0 {
				t.Errorf("the sink refused %d writes as fenced; want none: one member owned the key throughout", st.Fenced)
			}
		})
	}
}
