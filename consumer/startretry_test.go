package consumer_test

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/internal/devcluster"
	"github.com/keyshare/keyshare/testutil"
)

// spreadRecords is n keyed records over keys keys, key k on partition
// k % parts.
func spreadRecords(n, keys int, parts int32) []testutil.Record {
	recs := testutil.KeyedRecords(n, keys)
	for i := range recs {
		recs[i].Partition = int32(i%keys) % parts
	}
	return recs
}

// waitAllHandled waits until h has handled every record of produced,
// failing at once if a member's Run returns (it must retry what a broker
// answers while it starts, not give up).
func waitAllHandled(t *testing.T, h *history, produced []kafka.TopicPartition, members ...*member) {
	t.Helper()
	waitFor(t, "every record handled", 90*time.Second, func() bool {
		for _, m := range members {
			select {
			case err := <-m.done:
				close(m.done)
				t.Fatalf("member %s: Run returned while the broker was starting: %v", m.c.ID(), err)
			default:
			}
		}
		return h.count() == len(produced)
	})
	h.check(produced)
}

// TestStartRetriesBrokerErrors: a broker that has just started answers the
// first requests of a group with NOT_COORDINATOR and
// COORDINATOR_LOAD_IN_PROGRESS (the group coordinator is still loading),
// and those for partitions with LEADER_NOT_AVAILABLE (leaders are still
// being elected): describing the group, reading its committed offsets,
// the log offsets and the topics' metadata. Members started now retry
// until the broker answers, all join, and every record is handled.
func TestStartRetriesBrokerErrors(t *testing.T) {
	testutil.ParallelOnKfake(t)
	testutil.RequireKfake(t, "kfake faults answer the requests with a starting broker's errors")
	const topic = "fresh"
	cl, k := newCluster(t, map[string]int32{topic: 2})
	fake := k.Fake(t)
	produced := testutil.Produce(t, k.Brokers, topic, spreadRecords(300, 30, 2))
	const n = 3
	faults := map[string]*kfake.FaultHandle{
		"ConsumerGroupDescribe NOT_COORDINATOR":              fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ConsumerGroupDescribe}, Group: cl.group, Err: kerr.NotCoordinator, Count: n}),
		"ConsumerGroupDescribe COORDINATOR_LOAD_IN_PROGRESS": fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ConsumerGroupDescribe}, Group: cl.group, Err: kerr.CoordinatorLoadInProgress, Count: n}),
		"Metadata LEADER_NOT_AVAILABLE":                      fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: topic, Err: kerr.LeaderNotAvailable, Count: n}),
		"OffsetFetch NOT_COORDINATOR":                        fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetFetch}, Group: cl.group, Err: kerr.NotCoordinator, Count: n}),
		"ListOffsets LEADER_NOT_AVAILABLE":                   fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Topic: topic, Err: kerr.LeaderNotAvailable, Count: n}),
		"ListOffsets NOT_LEADER_OR_FOLLOWER":                 fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: n}),
	}
	h := newHistory(t)
	var members []*member
	for _, id := range []string{"a", "b", "c"} {
		members = append(members, cl.start(id, h.handler(id, 0)))
	}
	waitAllHandled(t, h, produced, members...)
	for name, f := range faults {
		if f.Hits() != n {
			t.Errorf("%s answered %d requests, want %d", name, f.Hits(), n)
		}
	}
}

// TestStartWaitsForBroker: members started while the broker is down (it
// restarts from its data on the same port) keep trying until it serves,
// then all join, and every record is handled.
func TestStartWaitsForBroker(t *testing.T) {
	testutil.RequireKfake(t, "restarts a kfake broker from its data on the same port")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	const topic = "restarting"
	dir := filepath.Join(t.TempDir(), "kafka")
	start := func() *kfake.Cluster {
		c, err := devcluster.StartKafka(devcluster.KafkaOptions{Addr: addr, DataDir: dir, Topics: map[string]int32{topic: 2}})
		if err != nil {
			t.Fatalf("start the broker on %s: %v", addr, err)
		}
		return c
	}
	broker := start()
	produced := testutil.Produce(t, addr, topic, spreadRecords(200, 20, 2))
	broker.Close()

	_, e := testutil.StartEtcd(t)
	cl := &cluster{t: t, endpoints: e.Endpoints, brokers: addr, group: "g", topics: []string{topic}}
	cl.mutate = func(c *consumer.Config) {
		c.StartTimeout = time.Second // each attempt
		c.Kafka["reconnect.backoff.max.ms"] = 500
	}
	h := newHistory(t)
	var members []*member
	for _, id := range []string{"a", "b"} {
		members = append(members, cl.start(id, h.handler(id, 0)))
	}
	time.Sleep(2 * time.Second) // the members try, and find no broker
	for _, m := range members {
		select {
		case err := <-m.done:
			close(m.done)
			t.Fatalf("member %s: Run returned while the broker was down: %v", m.c.ID(), err)
		default:
		}
	}
	t.Cleanup(start().Close)
	waitAllHandled(t, h, produced, members...)
	// The members leave while the broker still serves: the cleanups run
	// last registered first, so the broker would close before them and
	// each would wait out its drain budget with no broker to drain to.
	for _, m := range members {
		m.stop(t)
	}
}

// waitRunError waits for m's Run to return and returns its error.
func waitRunError(t *testing.T, m *member) error {
	t.Helper()
	select {
	case err := <-m.done:
		close(m.done)
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("member %s: Run still retrying after 30s; want it to end on a refusal no retry can fix", m.c.ID())
		return nil
	}
}

// TestRefusalEndsRun: what no retry can fix ends Run when it arrives,
// with an error that names the Kafka error and what to do: a principal
// that may not describe the group (at start), one that may not read the
// topic's committed offsets (while running), and a wrong SASL password.
// The member's attempts may take a minute each (StartTimeout), so a
// refusal reported only when an attempt times out would come too late.
func TestRefusalEndsRun(t *testing.T) {
	testutil.ParallelOnKfake(t)
	testutil.RequireKfake(t, "kfake faults and SASL users")
	patient := func(c *consumer.Config) { c.StartTimeout = time.Minute }
	t.Run("group authorization at start", func(t *testing.T) {
		cl, k := newCluster(t, map[string]int32{"orders": 1})
		cl.mutate = patient
		k.Fake(t).Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ConsumerGroupDescribe}, Err: kerr.GroupAuthorizationFailed, Count: -1})
		err := waitRunError(t, cl.start("a", newHistory(t).handler("a", 0)))
		if err == nil || !strings.Contains(err.Error(), "GROUP_AUTHORIZATION_FAILED") || !strings.Contains(err.Error(), "grant") {
			t.Fatalf("Run: %v; want an error naming GROUP_AUTHORIZATION_FAILED and what to grant", err)
		}
	})
	t.Run("topic authorization while running", func(t *testing.T) {
		cl, k := newCluster(t, map[string]int32{"orders": 1})
		cl.mutate = patient
		commitOffset(t, k.Brokers, cl.group, "orders", 0)
		k.Fake(t).Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetFetch}, Topic: "orders", Err: kerr.TopicAuthorizationFailed, Count: -1})
		err := waitRunError(t, cl.start("a", newHistory(t).handler("a", 0)))
		if err == nil || !strings.Contains(err.Error(), "TOPIC_AUTHORIZATION_FAILED") || !strings.Contains(err.Error(), "grant") {
			t.Fatalf("Run: %v; want an error naming TOPIC_AUTHORIZATION_FAILED and what to grant", err)
		}
	})
	t.Run("wrong SASL password", func(t *testing.T) {
		_, e := testutil.StartEtcd(t)
		k := testutil.StartKafka(t, map[string]int32{"orders": 1}, kfake.EnableSASL(), kfake.Superuser("PLAIN", "keyshare", "right"))
		cl := &cluster{t: t, endpoints: e.Endpoints, brokers: k.Brokers, group: "g", topics: []string{"orders"}}
		cl.mutate = func(c *consumer.Config) {
			patient(c)
			for key, v := range map[string]string{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "keyshare", "sasl.password": "wrong"} {
				c.Kafka[key] = v
			}
		}
		err := waitRunError(t, cl.start("a", newHistory(t).handler("a", 0)))
		if err == nil || !strings.Contains(err.Error(), "SASL authentication error") || !strings.Contains(err.Error(), "sasl.password") || strings.Contains(err.Error(), "wrong") {
			t.Fatalf("Run: %v; want an error naming the SASL refusal and the settings to check, without the password", err)
		}
	})
}

// TestStartThroughApacheRestart: on Apache Kafka, members started while
// the broker is down, which then restarts from its data (its group
// coordinator loads again, answering NOT_COORDINATOR or
// COORDINATOR_LOAD_IN_PROGRESS meanwhile, and its partitions get leaders
// again), all join and handle every record.
func TestStartThroughApacheRestart(t *testing.T) {
	if testutil.KafkaBackend() != testutil.BackendApache {
		t.Skip("Apache Kafka tier (KEYSHARE_KAFKA=apache): restarts a broker of its own")
	}
	const topic = "restarting"
	a := testutil.StartApacheKafka(t, testutil.ApacheKafkaOptions{Topics: map[string]int32{topic: 2}})
	produced := testutil.Produce(t, a.Brokers(), topic, spreadRecords(200, 20, 2))
	if err := a.Kill(0); err != nil {
		t.Fatal(err)
	}
	_, e := testutil.StartEtcd(t)
	cl := &cluster{t: t, endpoints: e.Endpoints, brokers: a.Brokers(), group: "g", topics: []string{topic}}
	cl.mutate = func(c *consumer.Config) {
		c.StartTimeout = 2 * time.Second // each attempt
		c.Kafka["reconnect.backoff.max.ms"] = 500
	}
	h := newHistory(t)
	var members []*member
	for _, id := range []string{"a", "b", "c"} {
		members = append(members, cl.start(id, h.handler(id, 0)))
	}
	time.Sleep(2 * time.Second) // the members try, and find no broker
	if err := a.Restart(0); err != nil {
		t.Fatal(err)
	}
	waitAllHandled(t, h, produced, members...)
}
