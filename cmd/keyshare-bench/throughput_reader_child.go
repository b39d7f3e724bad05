package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/keyshare/keyshare/consumer"
)

// readerFlags are the reader child's flags.
type readerFlags struct {
	mode, brokers, etcd, topic, group, id string
	partitions                            int
	from                                  kafka.Offset         // where a bare loop starts reading
	reset                                 consumer.OffsetReset // where a fresh member starts reading
	props                                 kvFlags
	cpuProfile, allocProfile              string
}

func parseReaderFlags(args []string) (*readerFlags, error) {
	var f readerFlags
	fs := flag.NewFlagSet(readerCommand, flag.ContinueOnError)
	fs.StringVar(&f.mode, "mode", "bare", "bare (a confluent-kafka-go poll loop) or keyshare (a member)")
	fs.StringVar(&f.brokers, "brokers", "", "bootstrap servers")
	fs.StringVar(&f.etcd, "etcd", "", "etcd endpoint (keyshare)")
	fs.StringVar(&f.topic, "topic", "", "topic")
	fs.IntVar(&f.partitions, "partitions", 1, "bare: read the topic's partitions 0 to N-1")
	fs.StringVar(&f.group, "group", "", "group")
	fs.StringVar(&f.id, "id", "", "member id (keyshare)")
	start := fs.String("start", "beginning", "where reading starts: the partition's beginning, or its end (a keyshare member: a fresh group's AutoOffsetReset)")
	fs.Var(&f.props, "X", "librdkafka property=value (repeatable)")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the reading to this file")
	fs.StringVar(&f.allocProfile, "allocprofile", "", "write an allocation profile of the reading to this file")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if f.partitions < 1 {
		return nil, fmt.Errorf("--partitions %d: want at least 1", f.partitions)
	}
	f.from, f.reset = kafka.OffsetBeginning, consumer.OffsetEarliest
	switch *start {
	case "beginning":
	case "end":
		f.from, f.reset = kafka.OffsetEnd, consumer.OffsetLatest
	default:
		return nil, fmt.Errorf("--start %q: want beginning or end", *start)
	}
	return &f, nil
}

// newReader builds the reader of the flags' mode, which counts each record
// in w. It returns the reading, which runs until its context ends, and what
// closes the reader's clients afterwards.
func (f *readerFlags) newReader(w *readerWindow) (read func(context.Context) error, closeReader func(), err error) {
	cm := kafka.ConfigMap{"bootstrap.servers": f.brokers, "log_level": 3}
	for k, v := range f.props {
		cm[k] = v
	}
	switch f.mode {
	case "bare":
		cm["group.id"] = f.group
		cm["enable.auto.commit"] = false
		kc, err := kafka.NewConsumer(&cm)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context) error { return f.readBare(ctx, kc, w) }, func() { kc.Close() }, nil
	case "keyshare":
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{f.etcd}, Logger: zap.NewNop()})
		if err != nil {
			return nil, nil, err
		}
		cfg := consumer.DefaultConfig()
		cfg.Group, cfg.Topics, cfg.MemberID, cfg.Kafka = f.group, []string{f.topic}, f.id, cm
		cfg.AutoOffsetReset = f.reset
		cfg.Logger = hclog.NewNullLogger()
		cfg.Handler = func(_ context.Context, m *kafka.Message) error { w.hit(m); return nil }
		k, err := consumer.New(cli, cfg)
		if err != nil {
			cli.Close()
			return nil, nil, err
		}
		return k.Run, func() { cli.Close() }, nil
	default:
		return nil, nil, fmt.Errorf("--mode %q: want bare or keyshare", f.mode)
	}
}

// readBare assigns the topic's partitions to kc and polls until ctx ends.
func (f *readerFlags) readBare(ctx context.Context, kc *kafka.Consumer, w *readerWindow) error {
	var tps []kafka.TopicPartition
	for p := range int32(f.partitions) {
		tps = append(tps, kafka.TopicPartition{Topic: &f.topic, Partition: p, Offset: f.from})
	}
	if err := kc.Assign(tps); err != nil {
		return err
	}
	for ctx.Err() == nil {
		if m, ok := kc.Poll(100).(*kafka.Message); ok && m.TopicPartition.Error == nil {
			w.hit(m)
		}
	}
	return nil
}

// awaitGo says the reader is ready and waits for the parent's "go" line.
func awaitGo(out *json.Encoder, in *bufio.Scanner) error {
	if err := out.Encode(readerReport{Ready: true}); err != nil {
		return err
	}
	if !in.Scan() || in.Text() != "go" {
		return errors.New("no go line on stdin")
	}
	return nil
}

// followParent reads the parent's "since N" lines into w until stdin
// closes, then calls stop.
func followParent(in *bufio.Scanner, w *readerWindow, stop func()) {
	for in.Scan() {
		if v, ok := strings.CutPrefix(in.Text(), "since "); ok {
			if ns, err := strconv.ParseInt(v, 10, 64); err == nil {
				w.since.Store(ns)
			}
		}
	}
	stop()
}

// writeAllocProfile writes the allocations so far to path.
func writeAllocProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("allocs").WriteTo(f, 0)
}
