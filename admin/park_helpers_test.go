package admin_test

import (
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/testutil"
)

// parkedKey is key k of orders/0 with its records parked: once a member
// of group g is at work (past a first record of another key), the key is
// parked and values produced as its records, and parkedKey returns when
// the commit has passed them (a parked record counts done). The group is
// closed with the test.
func parkedKey(t *testing.T, cli *clientv3.Client, brokers string, values ...string) (*admin.Group, admin.KeyQuery) {
	t.Helper()
	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": brokers, "log_level": 3}, "/keyshare", "g")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	testutil.Produce(t, brokers, "orders", []testutil.Record{{Key: []byte("other"), Value: []byte("v"), Partition: 0}})
	testutil.WaitFor(t, "the commit past the first record", 30*time.Second, func() bool {
		return testutil.Committed(t, brokers, "g", "orders", 1)[0] == 1
	})
	q := admin.KeyQuery{Topic: "orders", Key: []byte("k"), Partition: 0}
	if _, err := g.ParkKey(t.Context(), admin.ParkRequest{KeyQuery: q, By: "ops@test"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the member learns of the park
	recs := make([]testutil.Record, len(values))
	for i, v := range values {
		recs[i] = testutil.Record{Key: []byte("k"), Value: []byte(v), Partition: 0}
	}
	testutil.Produce(t, brokers, "orders", recs)
	testutil.WaitFor(t, "k's records parked (the commit past them)", 30*time.Second, func() bool {
		return testutil.Committed(t, brokers, "g", "orders", 1)[0] == int64(1+len(values))
	})
	return g, q
}
