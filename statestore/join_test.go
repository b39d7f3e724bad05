package statestore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// join is the handler of the join test: a customers record sets its
// customer's name; an orders record looks the name up in the customers'
// state and counts the customer's orders, keeping "name:count".
func join(store **Store) func(context.Context, *kafka.Message) error {
	return func(ctx context.Context, m *kafka.Message) error {
		k := KeyOf(ctx, m)
		if *m.TopicPartition.Topic == "customers" {
			k.Put(m.Value)
			return nil
		}
		name, ok, err := (*store).Lookup(ctx, m, "customers")
		switch {
		case err != nil:
			return err
		case !ok:
			return fmt.Errorf("no customer %s yet", m.Key)
		}
		n := 0
		if v, ok := k.Get(); ok {
			_, c, _ := strings.Cut(string(v), ":")
			fmt.Sscan(c, &n)
		}
		k.Put(fmt.Appendf(nil, "%s:%d", name, n+1))
		return nil
	}
}

// TestJoinOrdersWithCustomers: orders joined with a customers table, the
// two topics co-partitioned, through a scale-out (each topic's partition
// split between two members alike) and a leave: every customer's orders
// state holds its name, looked up from the customers' state on whichever
// member ran the order, and its exact order count. The ranges of the two
// topics have the same bounds and owners once the group settles.
func TestJoinOrdersWithCustomers(t *testing.T) {
	testutil.ParallelOnKfake(t)
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1, "customers": 1})
	g := &group{t: t, endpoints: e.Endpoints, brokers: k.Brokers, name: "g", topic: "orders", parts: 1, joined: []string{"customers"}}
	const customers = 30
	var names []testutil.Record
	for i := range customers {
		names = append(names, testutil.Record{Key: fmt.Appendf(nil, "c%d", i), Value: fmt.Appendf(nil, "name-%d", i)})
	}
	var orders []testutil.Record
	produceOrders := func(n int) {
		var recs []testutil.Record
		for i := range n {
			recs = append(recs, testutil.Record{Key: fmt.Appendf(nil, "c%d", (len(orders)+i)%customers), Value: []byte("order")})
		}
		orders = append(orders, recs...)
		g.waitCommitted(testutil.Produce(t, k.Brokers, "orders", recs))
	}
	start := func(id string) *member {
		var store *Store
		m := g.run(id, func(s *Store, c *consumer.Config) {
			store = s
			c.Handler = s.Handler(join(&store))
		}, nil)
		return m
	}
	a := start("a")
	testutil.Produce(t, k.Brokers, "customers", names)
	produceOrders(300)
	b := start("b")
	produceOrders(300)
	waitAligned(t, e.Endpoints, "orders", "customers")
	a.stop(t)
	produceOrders(300)
	b.stop(t)

	got := g.states("orders")
	for i := range customers {
		key := fmt.Sprintf("c%d", i)
		want := fmt.Sprintf("name-%d:%d", i, len(orders)/customers)
		if string(got[key]) != want {
			t.Errorf("customer %s: orders state %q, want %q", key, got[key], want)
		}
	}
}

// waitAligned waits until the group's ranges of topics a and b have the
// same bounds and owners, partition 0.
func waitAligned(t *testing.T, endpoints []string, a, b string) {
	t.Helper()
	cli := testutil.NewEtcdClient(t, endpoints)
	testutil.WaitFor(t, "the two topics' ranges laid out alike", 30*time.Second, func() bool {
		snap, err := coord.ReadSnapshot(t.Context(), cli, schema.Group{Name: "g"})
		if err != nil {
			return false
		}
		layout := func(topic string) string {
			var out []string
			for _, r := range snap.Ranges {
				if r.Record.Topic == topic && r.Record.State == schema.StateActive {
					out = append(out, fmt.Sprintf("%d-%d:%s", r.Record.Lo, r.Record.Hi, r.Record.Owner))
				}
			}
			return strings.Join(out, ",")
		}
		la, lb := layout(a), layout(b)
		return la != "" && la == lb && strings.Contains(la, ":a") && strings.Contains(la, ":b")
	})
}
