package statestore

import (
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/testutil"
)

// TestNewRefuses: settings and changelogs that cannot hold a group's
// state are refused at New, each with an error naming the value and what
// to do.
func TestNewRefuses(t *testing.T) {
	testutil.ParallelOnKfake(t)
	k := testutil.StartKafka(t, map[string]int32{"events": 2, "events-wide-state": 3, "other": 2})
	brokers := kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}
	createTopic(t, k.Brokers, "plain-state", 2, map[string]string{"cleanup.policy": "delete"})
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no group", Config{Topics: []string{"events"}, Kafka: brokers}, "Group is empty"},
		{"no topics", Config{Group: "g", Kafka: brokers}, "Topics is empty"},
		{"no brokers", Config{Group: "g", Topics: []string{"events"}}, "no bootstrap.servers"},
		{"changelog consumed", Config{Group: "g", Topics: []string{"events", "other"}, Kafka: brokers,
			Changelog: func(string, string) string { return "other" }}, `is "other", which the group consumes`},
		{"partition count", Config{Group: "g", Topics: []string{"events"}, Kafka: brokers,
			Changelog: func(string, string) string { return "events-wide-state" }}, `changelog "events-wide-state" has 3 partitions and its topic "events" has 2`},
		{"not compacted", Config{Group: "g", Topics: []string{"events"}, Kafka: brokers,
			Changelog: func(string, string) string { return "plain-state" }}, `cleanup.policy "delete": it must be compact`},
		{"no input", Config{Group: "g", Topics: []string{"missing"}, Kafka: brokers}, `topic "missing" does not exist`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(t.Context(), tc.cfg)
			if err == nil {
				s.Close()
				t.Fatalf("New accepted it")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v; want an error saying %q", err, tc.want)
			}
		})
	}
}

func createTopic(t *testing.T, brokers, topic string, parts int, configs map[string]string) {
	t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": brokers, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	res, err := a.CreateTopics(t.Context(), []kafka.TopicSpecification{{Topic: topic, NumPartitions: parts, ReplicationFactor: 1, Config: configs}})
	if err != nil || res[0].Error.Code() != kafka.ErrNoError {
		t.Fatalf("create %s: %v %v", topic, err, res)
	}
}
