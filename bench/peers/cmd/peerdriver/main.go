// Command peerdriver is the Go side of the peer benchmark (make bench-peers):
// one instance of a plain librdkafka consumer-group member or of a keyshare
// member, handling records with the shared work function and writing the
// shared record log (bench/peers/checker). It runs until SIGTERM, then leaves
// gracefully (the plain member commits its stored offsets; the keyshare
// member hands its ranges back) and exits.
//
//	peerdriver --mode plain    --brokers B --topic T --group G --log FILE --instance plain-0
//	peerdriver --mode keyshare --brokers B --etcd URL --topic T --group G --log FILE --instance ks-0 --concurrency 25
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/keyshare/keyshare/bench/peers/checker"
	"github.com/keyshare/keyshare/bench/worksleep"
	"github.com/keyshare/keyshare/consumer"
)

type driver struct {
	mode, brokers, etcd, topic, group, logPath, instance, block string
	concurrency                                                 int
	workMax                                                     int64
	ttl                                                         time.Duration

	blockP   int32
	blockO   int64
	blockFor time.Duration

	log *os.File
	mu  sync.Mutex
	att map[[2]int64]int
}

func main() {
	var d driver
	flag.StringVar(&d.mode, "mode", "", "plain or keyshare")
	flag.StringVar(&d.brokers, "brokers", "", "Kafka bootstrap servers")
	flag.StringVar(&d.etcd, "etcd", "", "etcd endpoint (keyshare)")
	flag.StringVar(&d.topic, "topic", "", "topic")
	flag.StringVar(&d.group, "group", "", "group id")
	flag.StringVar(&d.logPath, "log", "", "record log to append to")
	flag.StringVar(&d.instance, "instance", "", "instance name in the record log (and keyshare member id)")
	flag.IntVar(&d.concurrency, "concurrency", 100, "keyshare: records handled at once")
	flag.Int64Var(&d.workMax, "work-max-us", 5000, "work per record is uniform in [0, this] µs (a hash of partition and offset)")
	flag.StringVar(&d.block, "block", "", "PARTITION:OFFSET:MILLIS: this record takes MILLIS more")
	flag.DurationVar(&d.ttl, "ttl", 2*time.Second, "keyshare: etcd session TTL")
	flag.Parse()
	if err := d.run(); err != nil {
		fmt.Fprintf(os.Stderr, "peerdriver %s: %v\n", d.instance, err)
		os.Exit(1)
	}
}

func (d *driver) run() error {
	if d.block != "" {
		f := strings.Split(d.block, ":")
		if len(f) != 3 {
			return fmt.Errorf("--block %q: want PARTITION:OFFSET:MILLIS", d.block)
		}
		p, _ := strconv.Atoi(f[0])
		o, _ := strconv.ParseInt(f[1], 10, 64)
		ms, _ := strconv.Atoi(f[2])
		d.blockP, d.blockO, d.blockFor = int32(p), o, time.Duration(ms)*time.Millisecond
	} else {
		d.blockP = -1
	}
	var err error
	if d.log, err = os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return err
	}
	defer d.log.Close()
	d.att = map[[2]int64]int{}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	switch d.mode {
	case "plain":
		return d.plain(ctx)
	case "keyshare":
		return d.keyshare(ctx)
	}
	return fmt.Errorf("--mode %q: want plain or keyshare", d.mode)
}

func (d *driver) work(m *kafka.Message) time.Duration {
	p, o := m.TopicPartition.Partition, int64(m.TopicPartition.Offset)
	w := time.Duration(checker.WorkMicros(p, o, d.workMax)) * time.Microsecond
	if p == d.blockP && o == d.blockO {
		w += d.blockFor
	}
	return w
}

// handle does the record's work and writes its log line (one write(2), so a
// SIGKILL after it returns does not lose the line).
func (d *driver) handle(ctx context.Context, m *kafka.Message) error {
	start := time.Now()
	// worksleep, not a timer: a Go timer wakes up to a millisecond late in
	// an idle process (bench/worksleep), which the Java drivers'
	// parkNanos does not.
	if err := worksleep.Sleep(ctx, d.work(m)); err != nil {
		return err
	}
	end := time.Now()
	k := [2]int64{int64(m.TopicPartition.Partition), int64(m.TopicPartition.Offset)}
	d.mu.Lock()
	d.att[k]++
	a := d.att[k]
	d.mu.Unlock()
	line := fmt.Sprintf("%s\t%d\t%d\t%s\t%d\t%d\t%d\t%s\n", *m.TopicPartition.Topic, k[0], k[1], m.Key, a, start.UnixMicro(), end.UnixMicro(), d.instance)
	_, err := d.log.WriteString(line)
	return err
}

// plain is a consumer-group member handling one record at a time in
// partition order, storing each offset after its record is handled;
// librdkafka's auto-commit (every 5 s, and on rebalance and close) commits
// the stored offsets: the usual at-least-once loop.
func (d *driver) plain(ctx context.Context) error {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers": d.brokers, "group.id": d.group, "client.id": d.instance,
		"auto.offset.reset": "earliest", "enable.auto.offset.store": false,
		"session.timeout.ms": 6000, // the classic protocol's broker minimum, as for Parallel Consumer
		"log_level":          3,
	})
	if err != nil {
		return err
	}
	if err := c.SubscribeTopics([]string{d.topic}, nil); err != nil {
		c.Close()
		return err
	}
	for ctx.Err() == nil {
		ev := c.Poll(100)
		switch e := ev.(type) {
		case *kafka.Message:
			if err := d.handle(context.Background(), e); err != nil {
				c.Close()
				return err
			}
			if _, err := c.StoreMessage(e); err != nil {
				c.Close()
				return err
			}
		case kafka.Error:
			if e.IsFatal() {
				c.Close()
				return e
			}
		}
	}
	return c.Close()
}

// keyshare is one keyshare member, configured as `keyshare-bench` configures
// its members (fetch.wait.max.ms 20, in-flight bound max(1000, 4 ×
// concurrency)), with the TTL `keyshare-bench` gives member processes.
func (d *driver) keyshare(ctx context.Context) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{d.etcd}, Logger: zap.NewNop(), DialTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	cfg := consumer.DefaultConfig()
	cfg.Group, cfg.Topics, cfg.MemberID = d.group, []string{d.topic}, d.instance
	cfg.Kafka = kafka.ConfigMap{"bootstrap.servers": d.brokers, "log_level": 3, "fetch.wait.max.ms": 20}
	cfg.Concurrency, cfg.MaxInFlight = d.concurrency, max(1000, 4*d.concurrency)
	cfg.Handler, cfg.AutoOffsetReset = d.handle, consumer.OffsetEarliest
	cfg.SessionTTL = d.ttl
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: d.instance, Level: hclog.Warn, Output: os.Stderr})
	k, err := consumer.New(cli, cfg)
	if err != nil {
		return err
	}
	if err := k.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
