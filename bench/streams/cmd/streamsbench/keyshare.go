package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/keyshare/keyshare/bench/worksleep"
	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/keystate"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/statestore"
)

// timing is when a row's records were handled, in Unix µs, how often,
// and how long the Store's calls and the handler's took in all.
type timing struct {
	first, last  atomic.Int64
	handled      atomic.Int64
	storeNanos   atomic.Int64 // the Store's handler: restore waits, the handler, the append
	handlerNanos atomic.Int64 // the handler the Store wraps: the lookup and the count
}

// wrap times the Store's handler h.
func (t *timing) wrap(h consumer.Handler) consumer.Handler {
	return func(ctx context.Context, m *kafka.Message) error {
		start := time.Now()
		t.first.CompareAndSwap(0, start.UnixMicro())
		if err := h(ctx, m); err != nil {
			return err
		}
		t.handled.Add(1)
		t.storeNanos.Add(int64(time.Since(start)))
		end := time.Now().UnixMicro()
		for l := t.last.Load(); end > l && !t.last.CompareAndSwap(l, end); l = t.last.Load() {
		}
		return nil
	}
}

// wrapInner times the handler the Store wraps.
func (t *timing) wrapInner(h consumer.Handler) consumer.Handler {
	return func(ctx context.Context, m *kafka.Message) error {
		start := time.Now()
		err := h(ctx, m)
		t.handlerNanos.Add(int64(time.Since(start)))
		return err
	}
}

// countWithLookup is the handler the Store wraps: the lookup, then one
// more for the key's count, kept as a decimal string.
func countWithLookup(lookup time.Duration) consumer.Handler {
	return func(ctx context.Context, m *kafka.Message) error {
		// worksleep, not a timer: a Go timer wakes up to a millisecond
		// late in an idle process, which Java's parkNanos does not.
		if err := worksleep.Sleep(ctx, lookup); err != nil {
			return err
		}
		k := statestore.KeyOf(ctx, m)
		n := 0
		if v, ok := k.Get(); ok {
			var err error
			if n, err = strconv.Atoi(string(v)); err != nil {
				return fmt.Errorf("key %q: state %q is not a count: %w", m.Key, v, err)
			}
		}
		k.Put(strconv.AppendInt(nil, int64(n+1), 10))
		return nil
	}
}

// ksMember is one running keyshare member and its Store.
type ksMember struct {
	cli    *clientv3.Client
	store  *statestore.Store
	cancel context.CancelFunc
	done   chan error
}

// runKeyshare runs s.instances members of a new group on in, each with a
// Store and Concurrency s.parallel, until the group has committed the end
// of every partition; then stops them and reads the counts back from the
// changelog.
func (b *bench) runKeyshare(in *input, s setup) (row, error) {
	r := row{setup: s, partitions: in.partitions, records: in.records}
	group := fmt.Sprintf("ks-%s-%dx%d-%d", in.topic, s.instances, s.parallel, time.Now().UnixNano())
	var t timing
	var members []*ksMember
	stopAll := func() error {
		var errs []error
		for _, m := range members {
			m.cancel()
		}
		for _, m := range members {
			if err := <-m.done; err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, err)
			}
			m.store.Close()
			m.cli.Close()
		}
		members = nil
		return errors.Join(errs...)
	}
	defer stopAll()
	for i := range s.instances {
		m, err := b.startMember(group, fmt.Sprintf("m%d", i), in, s.parallel, &t)
		if err != nil {
			return r, err
		}
		members = append(members, m)
	}
	if err := b.waitCommitted(group, in, &t); err != nil {
		return r, err
	}
	if err := stopAll(); err != nil {
		return r, err
	}
	r.handled = t.handled.Load()
	if r.handled > 0 {
		r.storeOwn = time.Duration((t.storeNanos.Load() - t.handlerNanos.Load()) / r.handled)
	}
	r.elapsed = time.Duration(t.last.Load()-t.first.Load()) * time.Microsecond
	got, err := readChangelog(b.brokers, statestore.DefaultChangelog(group, in.topic), in.partitions)
	if err != nil {
		return r, err
	}
	if r.counts = compareCounts(got, in.want); r.counts == "" {
		r.counts = "exact"
	}
	return r, nil
}

func (b *bench) startMember(group, id string, in *input, parallel int, t *timing) (*ksMember, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{b.etcd}, Logger: zap.NewNop(), DialTimeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	km := kafka.ConfigMap{"bootstrap.servers": b.brokers, "log_level": 3}
	log := hclog.New(&hclog.LoggerOptions{Name: group + "/" + id, Level: hclog.Warn, Output: os.Stderr})
	sk := kafka.ConfigMap{}
	for k, v := range km {
		sk[k] = v
	}
	for k, v := range b.storeKafka {
		sk[k] = v
	}
	store, err := statestore.New(context.Background(), statestore.Config{Group: group, Topics: []string{in.topic}, Kafka: sk, ReplicationFactor: 1, Logger: log})
	if err != nil {
		cli.Close()
		return nil, err
	}
	cfg := consumer.DefaultConfig()
	cfg.Group, cfg.Topics, cfg.MemberID = group, []string{in.topic}, id
	cfg.Kafka, cfg.Logger = km, log
	cfg.Concurrency = parallel
	cfg.AutoOffsetReset = consumer.OffsetEarliest
	cfg.Handler = t.wrap(store.Handler(t.wrapInner(countWithLookup(b.lookup))))
	c, err := consumer.New(cli, cfg)
	if err != nil {
		store.Close()
		cli.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &ksMember{cli: cli, store: store, cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- c.Run(ctx) }()
	return m, nil
}

// waitCommitted waits until group's committed offset is the end of every
// partition of in: every record done. It gives up when no record has been
// handled for the stall time.
func (b *bench) waitCommitted(group string, in *input, t *timing) error {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": b.brokers, "group.id": group, "log_level": 3})
	if err != nil {
		return err
	}
	defer c.Close()
	var tps []kafka.TopicPartition
	for p := range in.partitions {
		tps = append(tps, kafka.TopicPartition{Topic: &in.topic, Partition: p})
	}
	moved, last := time.Now(), int64(-1)
	for {
		got, err := c.Committed(tps, 10000)
		if err != nil {
			return fmt.Errorf("read the committed offsets of group %s: %w", group, err)
		}
		done := true
		for _, tp := range got {
			done = done && int64(tp.Offset) >= in.end[tp.Partition]
		}
		if done {
			return nil
		}
		if n := t.handled.Load(); n != last {
			moved, last = time.Now(), n
		} else if time.Since(moved) > b.stall {
			return fmt.Errorf("no record handled for %s (%d handled of %d), committed %v", b.stall, n, in.records, got)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// readChangelog reads each partition of a changelog from its start to its
// end as a restore of the whole hash space would (keystate's restore
// rule), and returns each key's count.
func readChangelog(brokers, topic string, partitions int32) (map[string]int64, error) {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": brokers, "group.id": "streamsbench-changelog", "log_level": 3,
		"enable.auto.commit": false, "auto.offset.reset": "earliest"})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	out := map[string]int64{}
	for p := range partitions {
		rs, err := keystate.NewRestore(ledger.Full, keystate.DefaultConfig())
		if err != nil {
			return nil, err
		}
		if err := readPartition(c, topic, p, rs); err != nil {
			return nil, err
		}
		table, _, err := rs.Table(0)
		if err != nil {
			return nil, err
		}
		for e := range table.All() {
			if e.Deleted {
				continue
			}
			n, err := strconv.ParseInt(string(e.Value), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s/%d: key %q: state %q is not a count", topic, p, e.Key, e.Value)
			}
			out[string(e.Key)] = n
		}
	}
	return out, nil
}

func readPartition(c *kafka.Consumer, topic string, p int32, rs *keystate.Restore) error {
	lo, hi, err := c.QueryWatermarkOffsets(topic, p, 10000)
	if err != nil {
		return fmt.Errorf("read the end of %s/%d: %w", topic, p, err)
	}
	if hi <= lo {
		return nil
	}
	if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: p, Offset: kafka.Offset(lo)}}); err != nil {
		return err
	}
	defer c.Unassign()
	for deadline := time.Now().Add(time.Minute); ; {
		m, err := c.ReadMessage(time.Second)
		if err != nil {
			var ke kafka.Error
			if errors.As(err, &ke) && ke.IsTimeout() && time.Now().Before(deadline) {
				continue
			}
			return fmt.Errorf("read %s/%d: %w", topic, p, err)
		}
		e, err := statestore.DecodeMessage(m)
		if err != nil {
			return fmt.Errorf("%s/%d offset %d: %w", topic, p, m.TopicPartition.Offset, err)
		}
		if err := rs.Add(e); err != nil {
			return err
		}
		if int64(m.TopicPartition.Offset)+1 >= hi {
			return nil
		}
	}
}
