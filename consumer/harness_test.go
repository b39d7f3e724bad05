package consumer_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

// history records every handled record and checks per-key order and
// per-key exclusion as records are handled.
type history struct {
	t  *testing.T
	mu sync.Mutex
	// count of handles per topic/partition/offset
	handled map[string]int
	// running marks keys being handled right now
	running map[string]string
	// lastSeq is the highest sequence number handled per key (values are
	// "key:seq" as testutil.KeyedRecords writes them); a record's first
	// handling must not come after a later record of its key
	lastSeq map[string]int
	// values are the values of the records handled
	values    map[string]bool
	dups      int
	orderErrs []string
	total     int
}

func newHistory(t *testing.T) *history {
	return &history{t: t, handled: make(map[string]int), running: make(map[string]string), lastSeq: make(map[string]int), values: make(map[string]bool)}
}

func recID(m *kafka.Message) string {
	return fmt.Sprintf("%s/%d/%d", *m.TopicPartition.Topic, m.TopicPartition.Partition, m.TopicPartition.Offset)
}

// handler returns a Handler for member id that records into h, sleeping
// work per record.
func (h *history) handler(id string, work time.Duration) consumer.Handler {
	return func(ctx context.Context, m *kafka.Message) error {
		key := fmt.Sprintf("%s/%d/%s", *m.TopicPartition.Topic, m.TopicPartition.Partition, m.Key)
		h.mu.Lock()
		if other, busy := h.running[key]; busy {
			h.orderErrs = append(h.orderErrs, fmt.Sprintf("key %s handled by %s while %s handles it", key, id, other))
		}
		h.running[key] = id + "@" + recID(m)
		h.mu.Unlock()
		if work > 0 {
			select {
			case <-time.After(work):
			case <-ctx.Done():
				h.mu.Lock()
				delete(h.running, key)
				h.mu.Unlock()
				return ctx.Err()
			}
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.running, key)
		rid := recID(m)
		h.handled[rid]++
		h.values[string(m.Value)] = true
		h.total++
		if h.handled[rid] > 1 {
			// A record run again after a crash: its key's order was
			// checked at its first handling.
			h.dups++
			return nil
		}
		if _, seqStr, ok := strings.Cut(string(m.Value), ":"); ok {
			seq, _ := strconv.Atoi(seqStr)
			if last, ok := h.lastSeq[key]; ok && seq < last {
				h.orderErrs = append(h.orderErrs, fmt.Sprintf("key %s: seq %d after %d (offset %d, member %s)", key, seq, last, m.TopicPartition.Offset, id))
			}
			h.lastSeq[key] = max(h.lastSeq[key], seq)
		}
		return nil
	}
}

func (h *history) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.handled)
}

// check fails on order violations and on any produced record not handled;
// it returns the duplicates.
func (h *history) check(produced []kafka.TopicPartition) int {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.orderErrs {
		h.t.Error(e)
	}
	missing := 0
	for _, tp := range produced {
		if h.handled[fmt.Sprintf("%s/%d/%d", *tp.Topic, tp.Partition, tp.Offset)] == 0 {
			missing++
		}
	}
	if missing > 0 {
		h.t.Fatalf("%d of %d produced records never handled", missing, len(produced))
	}
	return h.dups
}

// member is a running consumer with its own etcd client.
type member struct {
	c      *consumer.Consumer
	cancel context.CancelFunc
	done   chan error
}

type cluster struct {
	t         *testing.T
	endpoints []string
	brokers   string
	group     string
	topics    []string
	mutate    func(*consumer.Config)
}

func (cl *cluster) config(id string, h consumer.Handler) consumer.Config {
	cfg := consumer.DefaultConfig()
	cfg.Group = cl.group
	cfg.Topics = cl.topics
	cfg.Kafka = kafka.ConfigMap{"bootstrap.servers": cl.brokers, "log_level": 3, "fetch.wait.max.ms": 50}
	cfg.Handler = h
	cfg.MemberID = id
	cfg.SessionTTL = 2 * time.Second
	cfg.DrainTimeout = 10 * time.Second
	cfg.FlushInterval = 100 * time.Millisecond
	cfg.CommitInterval = 200 * time.Millisecond
	cfg.RebalanceDebounce = 50 * time.Millisecond
	cfg.Logger = testutil.Logger(cl.t)
	if cl.mutate != nil {
		cl.mutate(&cfg)
	}
	return cfg
}

func (cl *cluster) start(id string, h consumer.Handler) *member {
	cl.t.Helper()
	cli := testutil.NewEtcdClient(cl.t, cl.endpoints)
	c, err := consumer.New(cli, cl.config(id, h))
	if err != nil {
		cl.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- c.Run(ctx) }()
	cl.t.Cleanup(func() { m.stop(cl.t) })
	return m
}

// stop cancels the member and waits for Run to return (graceful leave).
func (m *member) stop(t *testing.T) {
	t.Helper()
	m.cancel()
	select {
	case err, ok := <-m.done:
		if ok && err != nil {
			t.Errorf("member %s: Run: %v", m.c.ID(), err)
		}
		if ok {
			close(m.done)
		}
	case <-time.After(60 * time.Second):
		t.Errorf("member %s did not stop within 60s", m.c.ID())
	}
}

// counter reads the member's counter named name; -1 if it has none yet.
func (m *member) counter(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := m.c.Metrics().Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return -1
}

// waitFor is testutil.WaitFor.
var waitFor = testutil.WaitFor

// commitWatcher polls the group's committed offsets with a separate client
// and checks that they never go backwards.
type commitWatcher struct {
	mu   sync.Mutex
	seen map[int32][]int64
	// polls and failed count the reads; a failed read is a sample missed
	// (the broker busy electing leaders), not a failure, unless none
	// succeeded
	polls, failed int
	lastErr       error
	stop          chan struct{}
	done          chan struct{}
}

func watchCommits(t *testing.T, brokers, group, topic string, parts int32) *commitWatcher {
	w := &commitWatcher{seen: make(map[int32][]int64), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			got, err := testutil.ReadCommitted(brokers, group, topic, parts)
			w.mu.Lock()
			w.polls++
			if err != nil {
				w.failed++
				w.lastErr = err
				w.mu.Unlock()
				continue
			}
			for p, o := range got {
				s := w.seen[p]
				if len(s) == 0 || s[len(s)-1] != o {
					w.seen[p] = append(s, o)
				}
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.close() })
	return w
}

func (w *commitWatcher) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *commitWatcher) checkMonotonic(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.polls > 0 && w.failed == w.polls {
		t.Errorf("every one of %d reads of the committed offsets failed; the last: %v", w.polls, w.lastErr)
	}
	for p, s := range w.seen {
		for i := 1; i < len(s); i++ {
			if s[i] < s[i-1] {
				t.Errorf("partition %d: committed offset went back from %d to %d", p, s[i-1], s[i])
			}
		}
	}
}
