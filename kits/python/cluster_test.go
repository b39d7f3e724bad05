package kit_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/testutil"
)

// cluster is an exactly-once test's world: etcd, a broker, PostgreSQL,
// the Python endpoint and the member processes delivering to it.
type cluster struct {
	t       *testing.T
	dir     string
	etcd    string
	brokers string
	cli     *clientv3.Client
	pgURL   string
	ep      *pyProcess
	// memberArgs are flags every member gets.
	memberArgs []string

	mu      sync.Mutex
	members map[string]*member
	acked   []ack
}

type member struct {
	cmd *exec.Cmd
	log *bytes.Buffer
}

type ack struct {
	partition int32
	offset    int64
	key       string
	seq       int
}

const (
	topic = "orders"
	group = "g"
	parts = 2
	ttl   = 2 * time.Second
)

// switchOff names the guarantee a run turns off, to see its check fail:
// "" none, "fence" the kit's fence check (--unfenced), "applied" the
// applied rows (--forget-applied).
type switchOff string

// startCluster starts everything but the members. With batch the
// endpoint applies each request's records in one transaction
// (PostgresSink.apply_batch), and every member sends batches.
func startCluster(t *testing.T, off switchOff, batch bool) *cluster {
	python := kitPython(t)
	keyshareBin(t) // built before anything starts: a cold build takes a minute
	pg := testutil.StartPostgres(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{topic: parts})
	c := &cluster{t: t, dir: t.TempDir(), etcd: e.Endpoints[0], brokers: k.Brokers, cli: cli, pgURL: pg.URL, members: map[string]*member{}}
	if err := os.Mkdir(c.control(""), 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{filepath.Join(kitDir, "testdata", "eo_endpoint.py"), "--postgres", pg.URL,
		"--log", c.endpointLog(), "--control", c.control("")}
	if batch {
		args = append(args, "--batch")
		c.memberArgs = []string{"--batch-size", "8"}
	}
	switch off {
	case "fence":
		args = append(args, "--unfenced")
	case "applied":
		args = append(args, "--forget-applied")
	}
	c.ep = startPy(t, python, args...)
	t.Cleanup(c.stopAll)
	return c
}

func (c *cluster) control(name string) string { return filepath.Join(c.dir, "control", name) }
func (c *cluster) endpointLog() string        { return filepath.Join(c.dir, "endpoint.jsonl") }

// start runs `keyshare member --deliver` as id, with extra flags.
func (c *cluster) start(id string, extra ...string) {
	args := append([]string{"member", "--brokers", c.brokers, "--etcd", c.etcd, "--group", group, "--topic", topic,
		"--id", id, "--deliver", "http://" + c.ep.addr + "/records", "--ttl", ttl.String(),
		"--rebalance-debounce", "100ms", "--drain-timeout", "10s"}, c.memberArgs...)
	args = append(args, extra...)
	cmd := exec.Command(keyshareBin(c.t), args...)
	log := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = &lockedWriter{w: log, mu: &c.mu}, &lockedWriter{w: log, mu: &c.mu}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.members[id] = &member{cmd: cmd, log: log}
	c.mu.Unlock()
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// signal sends sig to member id; SIGTERM and SIGKILL wait for its exit.
func (c *cluster) signal(id string, sig syscall.Signal) {
	c.mu.Lock()
	m := c.members[id]
	c.mu.Unlock()
	if m == nil {
		c.t.Fatalf("no member %s", id)
	}
	_ = m.cmd.Process.Signal(sig)
	if sig != syscall.SIGTERM && sig != syscall.SIGKILL {
		return
	}
	done := make(chan error, 1)
	go func() { done <- m.cmd.Wait() }()
	select {
	case err := <-done:
		if sig == syscall.SIGTERM && err != nil {
			c.t.Errorf("member %s did not leave cleanly: %v", id, err)
		}
	case <-time.After(60 * time.Second):
		_ = m.cmd.Process.Kill()
		c.t.Errorf("member %s did not exit within 60 s of %v", id, sig)
	}
	c.mu.Lock()
	m.cmd = nil
	c.mu.Unlock()
}

func (c *cluster) stopAll() {
	c.mu.Lock()
	var ids []string
	for id, m := range c.members {
		if m.cmd != nil {
			ids = append(ids, id)
		}
	}
	c.mu.Unlock()
	for _, id := range ids {
		c.mu.Lock()
		cmd := c.members[id].cmd
		c.mu.Unlock()
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	if c.t.Failed() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for id, m := range c.members {
			c.t.Logf("--- member %s log (tail)\n%s", id, lastLines(m.log.String(), 40))
		}
	}
}

// leader is the id of the group's leader ("" while there is none): the
// oldest key of the group's election prefix (docs/etcd-keys.md).
func (c *cluster) leader() string {
	resp, err := c.cli.Get(c.t.Context(), "/keyshare/"+group+"/election/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// produce writes records at rate per second over keys keys until ctx
// ends, each value "key-K:SEQ", and keeps every acknowledged one.
func (c *cluster) produce(ctx context.Context, keys int, rate float64) error {
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": c.brokers, "acks": "all", "enable.idempotence": true, "linger.ms": 5, "log_level": 3})
	if err != nil {
		return err
	}
	defer p.Close()
	reports := make(chan kafka.Event, 1024)
	var sent int
	seq := make([]int, keys)
	tp := topic
	start := time.Now()
	var acks sync.WaitGroup
	acks.Add(1)
	go func() {
		defer acks.Done()
		for ev := range reports {
			m := ev.(*kafka.Message)
			if m.TopicPartition.Error != nil {
				c.t.Errorf("produce: %v", m.TopicPartition.Error)
				continue
			}
			var k, s int
			fmt.Sscanf(string(m.Value), "key-%d:%d", &k, &s)
			c.mu.Lock()
			c.acked = append(c.acked, ack{m.TopicPartition.Partition, int64(m.TopicPartition.Offset), string(m.Key), s})
			c.mu.Unlock()
		}
	}()
	for ctx.Err() == nil {
		k := (sent*7919 + sent/keys) % keys
		msg := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &tp, Partition: kafka.PartitionAny},
			Key: fmt.Appendf(nil, "key-%d", k), Value: fmt.Appendf(nil, "key-%d:%d", k, seq[k])}
		if err := p.Produce(msg, reports); err != nil {
			return err
		}
		seq[k]++
		sent++
		if ahead := time.Duration(float64(sent)/rate*float64(time.Second)) - time.Since(start); ahead > 0 {
			select {
			case <-time.After(ahead):
			case <-ctx.Done():
			}
		}
	}
	if left := p.Flush(15000); left > 0 {
		c.t.Errorf("produce: %d records unacknowledged 15 s after the last", left)
		return nil // their reports may still come: reports stays open
	}
	close(reports)
	acks.Wait()
	return nil
}

// ends is, per partition, the offset after the last acknowledged record.
func (c *cluster) ends() map[int32]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	end := map[int32]int64{}
	for _, a := range c.acked {
		end[a.partition] = max(end[a.partition], a.offset+1)
	}
	return end
}

func (c *cluster) ackedCopy() []ack {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := append([]ack(nil), c.acked...)
	sort.Slice(out, func(i, j int) bool {
		return out[i].partition < out[j].partition || out[i].partition == out[j].partition && out[i].offset < out[j].offset
	})
	return out
}
