package testutil

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/internal/devcluster"
)

// shared is the Apache Kafka broker of this test binary.
var shared struct {
	once sync.Once
	k    *devcluster.ApacheKafka
	err  error
}

// sharedApache starts the binary's broker on first use; a failed start
// fails every test that asks, with the same error.
func sharedApache(t testing.TB) *devcluster.ApacheKafka {
	t.Helper()
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "keyshare-kafka-shared-")
		if err != nil {
			shared.err = err
			return
		}
		began := time.Now()
		shared.k, shared.err = devcluster.StartApacheKafka(devcluster.ApacheKafkaOptions{Dir: dir, Logf: t.Logf})
		if shared.err != nil {
			shared.err = fmt.Errorf("%w (files kept in %s)", shared.err, dir)
			return
		}
		t.Logf("Apache Kafka %s serving on %s after %s; broker log %s", devcluster.ApacheKafkaVersion, shared.k.Brokers(),
			time.Since(began).Round(time.Millisecond), shared.k.LogFiles()[0])
	})
	if shared.err != nil {
		t.Fatalf("start Apache Kafka: %v", shared.err)
	}
	return shared.k
}

// RunTests runs the package's tests, then stops the shared Apache Kafka
// broker if a test started one, removing its files unless a test failed
// (then their path is printed). Packages whose tests call StartKafka call
// it from TestMain: os.Exit(testutil.RunTests(m)). Without it the broker
// still dies with the test binary (devcluster starts it with Pdeathsig),
// but its directory stays.
func RunTests(m *testing.M) int {
	code := m.Run()
	if k := shared.k; k != nil {
		for i := range k.ListenAddrs() {
			_ = k.Kill(i) // its data is dropped: no need for a graceful stop
		}
		if code != 0 {
			fmt.Fprintf(os.Stderr, "Apache Kafka broker log kept: %s\n", strings.Join(k.LogFiles(), " "))
		} else {
			_ = os.RemoveAll(k.Dir())
		}
	}
	return code
}

// StartApacheKafka starts an Apache Kafka cluster of its own for one test
// (for faults that need it: killing or restarting a node), in a directory
// that is removed when the test passes and kept, with the broker logs'
// paths logged, when it fails.
func StartApacheKafka(t testing.TB, o devcluster.ApacheKafkaOptions) *devcluster.ApacheKafka {
	t.Helper()
	dir, err := os.MkdirTemp("", "keyshare-kafka-")
	if err != nil {
		t.Fatal(err)
	}
	o.Dir = dir
	if o.Logf == nil {
		o.Logf = t.Logf
	}
	k, err := devcluster.StartApacheKafka(o)
	if err != nil {
		t.Fatalf("start Apache Kafka: %v (files kept in %s)", err, dir)
	}
	t.Cleanup(func() {
		for i := range k.ListenAddrs() {
			_ = k.Kill(i)
		}
		if t.Failed() {
			t.Logf("Apache Kafka broker logs kept: %s", strings.Join(k.LogFiles(), " "))
			return
		}
		_ = os.RemoveAll(dir)
	})
	return k
}

// resetKafka deletes every consumer group and every topic but Kafka's own
// (__consumer_offsets and the like), and waits until they are gone, so that
// the next test of the binary starts on an empty broker.
func resetKafka(t testing.TB, brokers string) {
	t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": brokers, "log_level": 3})
	if err != nil {
		t.Fatalf("admin client: %v", err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	groups, err := a.ListConsumerGroups(ctx)
	if err != nil {
		t.Fatalf("reset Apache Kafka: list groups: %v", err)
	}
	var ids []string
	for _, g := range groups.Valid {
		ids = append(ids, g.GroupID)
	}
	if len(ids) > 0 {
		res, err := a.DeleteConsumerGroups(ctx, ids)
		if err != nil {
			t.Fatalf("reset Apache Kafka: delete groups %v: %v", ids, err)
		}
		for _, r := range res.ConsumerGroupResults {
			if r.Error.Code() != kafka.ErrNoError && r.Error.Code() != kafka.ErrGroupIDNotFound {
				t.Fatalf("reset Apache Kafka: delete group %q (a client of an earlier test still in it?): %v", r.Group, r.Error)
			}
		}
	}
	md, err := a.GetMetadata(nil, true, 10000)
	if err != nil {
		t.Fatalf("reset Apache Kafka: metadata: %v", err)
	}
	var topics []string
	for name := range md.Topics {
		if !strings.HasPrefix(name, "__") {
			topics = append(topics, name)
		}
	}
	if len(topics) == 0 {
		return
	}
	res, err := a.DeleteTopics(ctx, topics, kafka.SetAdminOperationTimeout(30*time.Second))
	if err != nil {
		t.Fatalf("reset Apache Kafka: delete topics %v: %v", topics, err)
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError && r.Error.Code() != kafka.ErrUnknownTopicOrPart {
			t.Fatalf("reset Apache Kafka: delete topic %q: %v", r.Topic, r.Error)
		}
	}
	WaitFor(t, "deleted topics gone from the metadata", 30*time.Second, func() bool {
		md, err := a.GetMetadata(nil, true, 5000)
		if err != nil {
			return false
		}
		for _, name := range topics {
			if _, ok := md.Topics[name]; ok {
				return false
			}
		}
		return true
	})
}
