package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

func TestThreadsCPU(t *testing.T) {
	dir := t.TempDir()
	for tid, th := range map[string]struct{ comm, schedstat string }{
		"100": {"keyshare-bench\n", "5000 10 3\n"},
		"101": {"rdk:main\n", "700 2 9\n"},
		"102": {"rdk:broker1\n", "1300 0 4\n"},
		"103": {"rdk:bg\n", ""}, // no schedstat: ended meanwhile
	} {
		if err := os.MkdirAll(filepath.Join(dir, tid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, tid, "comm"), []byte(th.comm), 0o644); err != nil {
			t.Fatal(err)
		}
		if th.schedstat != "" {
			if err := os.WriteFile(filepath.Join(dir, tid, "schedstat"), []byte(th.schedstat), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	ns, n, err := threadsCPU(dir, librdkafkaThreads)
	if err != nil || ns != 2000 || n != 2 {
		t.Fatalf("threadsCPU = %d ns over %d threads, %v; want 2000 over 2", ns, n, err)
	}
}

// TestThreadsCPUFindsLibrdkafka: a client's threads carry the prefix the
// throughput table looks for.
func TestThreadsCPUFindsLibrdkafka(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	kc, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "log_level": 0})
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	_, n, err := threadsCPU("/proc/self/task", librdkafkaThreads)
	if err != nil || n < 2 {
		t.Fatalf("%d librdkafka threads found (%v), want its main thread and a broker's at least", n, err)
	}
}
