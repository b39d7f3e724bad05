package consumer

import (
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// TestKafkaConfig: keyshare's fetch.wait.max.ms applies only where
// Config.Kafka says nothing, and the settings keyshare controls win over
// Config.Kafka.
func TestKafkaConfig(t *testing.T) {
	get := func(cm kafka.ConfigMap, k string) any {
		v, err := cm.Get(k, nil)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cm := kafkaConfig(Config{Group: "g", Kafka: kafka.ConfigMap{"bootstrap.servers": "b:9092"}})
	if got := get(cm, "fetch.wait.max.ms"); got != defaultFetchWaitMs {
		t.Errorf("fetch.wait.max.ms = %v, want keyshare's default %d", got, defaultFetchWaitMs)
	}
	if got := get(cm, "bootstrap.servers"); got != "b:9092" {
		t.Errorf("bootstrap.servers = %v, want the caller's", got)
	}

	cm = kafkaConfig(Config{Group: "g", Kafka: kafka.ConfigMap{"fetch.wait.max.ms": 500, "enable.partition.eof": false, "group.id": "other"}})
	for k, want := range map[string]any{"fetch.wait.max.ms": 500, "enable.partition.eof": true, "group.id": "g", "auto.offset.reset": "error"} {
		if got := get(cm, k); got != want {
			t.Errorf("%s = %v, want %v", k, got, want)
		}
	}
}
