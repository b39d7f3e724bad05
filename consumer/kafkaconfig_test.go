package consumer

import (
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// TestKafkaConfig: the settings keyshare controls win over Config.Kafka,
// the caller's other settings pass through, keyshare's one default
// (fetch.queue.backoff.ms 50) gives way to the caller's value, and
// fetch.wait.max.ms stays librdkafka's (500 ms) unless the caller sets it.
// A default of 100 ms for it cost Apache Kafka three to four times the CPU
// at idle with a group of 4,096 partitions.
func TestKafkaConfig(t *testing.T) {
	get := func(cm kafka.ConfigMap, k string) any {
		v, err := cm.Get(k, nil)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cm := kafkaConfig(Config{Group: "g", Kafka: kafka.ConfigMap{"bootstrap.servers": "b:9092"}})
	if v, ok := cm["fetch.wait.max.ms"]; ok {
		t.Errorf("fetch.wait.max.ms = %v set by keyshare, want librdkafka's default", v)
	}
	if got := get(cm, "fetch.queue.backoff.ms"); got != 50 {
		t.Errorf("fetch.queue.backoff.ms = %v, want keyshare's default 50", got)
	}
	if got := get(cm, "bootstrap.servers"); got != "b:9092" {
		t.Errorf("bootstrap.servers = %v, want the caller's", got)
	}

	cm = kafkaConfig(Config{Group: "g", Kafka: kafka.ConfigMap{"fetch.wait.max.ms": 100, "fetch.queue.backoff.ms": 1000, "enable.partition.eof": false, "group.id": "other"}})
	for k, want := range map[string]any{"fetch.wait.max.ms": 100, "fetch.queue.backoff.ms": 1000, "enable.partition.eof": true, "group.id": "g", "auto.offset.reset": "error"} {
		if got := get(cm, k); got != want {
			t.Errorf("%s = %v, want %v", k, got, want)
		}
	}
}
