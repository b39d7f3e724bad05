package devcluster

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// requireApache skips a test of the real broker unless the Apache tier was
// asked for (make test-kafka sets KEYSHARE_KAFKA=apache).
func requireApache(t *testing.T) {
	t.Helper()
	if os.Getenv("KEYSHARE_KAFKA") != "apache" {
		t.Skip("needs a real Apache Kafka broker: set KEYSHARE_KAFKA=apache (make test-kafka)")
	}
}

// startApache starts a cluster in a directory that is kept, with its path
// logged, when the test fails.
func startApache(t *testing.T, o ApacheKafkaOptions) *ApacheKafka {
	t.Helper()
	dir, err := os.MkdirTemp("", "keyshare-kafka-")
	if err != nil {
		t.Fatal(err)
	}
	o.Dir = dir
	o.Logf = t.Logf
	k, err := StartApacheKafka(o)
	if err != nil {
		t.Fatalf("start apache kafka: %v (files kept in %s)", err, dir)
	}
	t.Cleanup(func() {
		// Killed, not stopped: a graceful stop of all three at once
		// waits for quorum that is leaving, and the data is dropped anyway.
		for i := range k.ListenAddrs() {
			_ = k.Kill(i)
		}
		if t.Failed() {
			t.Logf("broker logs kept: %s", strings.Join(k.LogFiles(), " "))
			return
		}
		os.RemoveAll(dir)
	})
	return k
}

func produceOne(t *testing.T, brokers, topic string) kafka.TopicPartition {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": brokers, "acks": "all", "log_level": 3, "message.timeout.ms": 30000})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	done := make(chan kafka.Event, 1)
	if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Value: []byte("v")}, done); err != nil {
		t.Fatal(err)
	}
	m := (<-done).(*kafka.Message)
	if m.TopicPartition.Error != nil {
		t.Fatalf("produce to %s: %v", topic, m.TopicPartition.Error)
	}
	return m.TopicPartition
}

// TestApacheKafkaNodeKilledAndRestarted: three combined nodes; with one
// killed the others keep the quorum and serve the replicated topic; the node
// restarts from its data and rejoins.
func TestApacheKafkaNodeKilledAndRestarted(t *testing.T) {
	requireApache(t)
	k := startApache(t, ApacheKafkaOptions{Nodes: 3, Topics: map[string]int32{"t": 1}})
	if got := len(k.ListenAddrs()); got != 3 {
		t.Fatalf("%d listen addresses, want 3", got)
	}
	if tp := produceOne(t, k.Brokers(), "t"); tp.Offset != 0 {
		t.Fatalf("first record at offset %d", tp.Offset)
	}
	pids := k.Pids()
	for i, pid := range pids {
		if pid <= 0 || syscall.Kill(pid, 0) != nil {
			t.Fatalf("node %d: pid %d is not a running process (pids %v)", i, pid, pids)
		}
	}
	if err := k.Kill(1); err != nil {
		t.Fatal(err)
	}
	if err := k.Kill(1); err == nil {
		t.Fatal("killing a stopped node succeeded")
	}
	if got := k.Pids(); got[0] != pids[0] || got[1] != 0 || got[2] != pids[2] {
		t.Fatalf("pids after killing node 1: %v, want [%d 0 %d]", got, pids[0], pids[2])
	}
	if tp := produceOne(t, k.Brokers(), "t"); tp.Offset != 1 {
		t.Fatalf("record with node 1 down at offset %d, want 1", tp.Offset)
	}
	if err := k.Restart(1); err != nil {
		t.Fatal(err)
	}
	// The restarted node serves the cluster's metadata, topic included.
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": k.ListenAddrs()[1], "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	topic := "t"
	md, err := a.GetMetadata(&topic, false, 10000)
	if err != nil || len(md.Brokers) != 3 || len(md.Topics["t"].Partitions) != 1 || len(md.Topics["t"].Partitions[0].Replicas) != 3 {
		t.Fatalf("metadata from the restarted node: %+v, %v", md, err)
	}
}

// TestApacheKafkaRestartFromDir: a single node stopped and started again on
// the same directory keeps its records and cluster ID.
func TestApacheKafkaRestartFromDir(t *testing.T) {
	requireApache(t)
	dir := t.TempDir()
	k, err := StartApacheKafka(ApacheKafkaOptions{Dir: dir, Topics: map[string]int32{"t": 1}})
	if err != nil {
		t.Fatal(err)
	}
	produceOne(t, k.Brokers(), "t")
	k.Close()
	k, err = StartApacheKafka(ApacheKafkaOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if tp := produceOne(t, k.Brokers(), "t"); tp.Offset != 1 {
		t.Fatalf("record after the restart at offset %d, want 1", tp.Offset)
	}
}

// TestApacheKafkaNeedsJavaAndMaven: without java, or without mvn and
// without cached jars, StartApacheKafka fails at once naming what to
// install. It needs neither tool, so it runs in the hermetic tier too.
func TestApacheKafkaNeedsJavaAndMaven(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("KEYSHARE_KAFKA_LIB", "")
	start := time.Now()
	_, err := StartApacheKafka(ApacheKafkaOptions{Dir: t.TempDir()})
	if !errors.Is(err, ErrNoJava) || !strings.Contains(err.Error(), "install a JDK or JRE 17+") {
		t.Fatalf("without java: %v", err)
	}
	t.Log(err)

	java, lookErr := exec.LookPath("java")
	if lookErr != nil {
		// the PATH is empty now; look where the machine keeps it
		for _, p := range []string{"/usr/bin/java", "/usr/local/bin/java"} {
			if _, err := os.Stat(p); err == nil {
				java = p
			}
		}
	}
	if java == "" {
		t.Logf("no java on this machine: the missing-mvn case needs one")
		return
	}
	bin := t.TempDir()
	if err := os.Symlink(java, filepath.Join(bin, "java")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // no cached jars
	_, err = StartApacheKafka(ApacheKafkaOptions{Dir: t.TempDir()})
	if !errors.Is(err, ErrNoMaven) || !strings.Contains(err.Error(), "install Maven") {
		t.Fatalf("without mvn: %v", err)
	}
	t.Log(err)
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the errors took %s", d)
	}
}

// TestKafkaJarsResolvedOnce: two resolutions into one empty cache at the
// same time take turns and agree (one runs mvn, the other waits and finds
// the jars); a later one reuses the cache without mvn.
func TestKafkaJarsResolvedOnce(t *testing.T) {
	requireApache(t)
	if os.Getenv("KEYSHARE_KAFKA_LIB") != "" {
		t.Skip("KEYSHARE_KAFKA_LIB is set: no cache to test")
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	type res struct {
		lib string
		err error
	}
	out := make(chan res, 2)
	for range 2 {
		go func() {
			lib, err := KafkaJarDir(t.Logf)
			out <- res{lib, err}
		}()
	}
	a, b := <-out, <-out
	if a.err != nil || b.err != nil || a.lib != b.lib {
		t.Fatalf("concurrent resolutions: %+v, %+v", a, b)
	}
	jars, _ := filepath.Glob(filepath.Join(a.lib, "kafka_2.13-"+ApacheKafkaVersion+".jar"))
	if len(jars) != 1 {
		t.Fatalf("no kafka_2.13-%s.jar in %s", ApacheKafkaVersion, a.lib)
	}
	leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(a.lib), "resolving-*"))
	if len(leftovers) > 0 {
		t.Fatalf("temporary directories left: %v", leftovers)
	}
	t.Setenv("PATH", t.TempDir()) // no mvn: the cache must do
	again, err := KafkaJarDir(nil)
	if err != nil || again != a.lib {
		t.Fatalf("later resolution: %q, %v; want %q from the cache", again, err, a.lib)
	}
}
