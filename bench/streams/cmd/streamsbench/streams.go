package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/internal/devcluster"
)

// runStreams runs CountApp on in with s.parallel stream threads until its
// output holds every key's count, stops it, and reads the final counts.
func (b *bench) runStreams(in *input, s setup) (row, error) {
	r := row{setup: s, partitions: in.partitions, records: in.records}
	app := fmt.Sprintf("streams-%s-%d", in.topic, time.Now().UnixNano())
	out := app + "-out"
	if err := devcluster.CreateTopics(b.brokers, map[string]int32{out: in.partitions}, 1); err != nil {
		return r, err
	}
	tail, err := newOutputReader(b.brokers, out, in.partitions)
	if err != nil {
		return r, err
	}
	defer tail.close()
	var stdout bytes.Buffer
	cmd := b.streamsCommand(in.topic, out, app, s.parallel)
	cmd.Stdout = &stdout
	logPath := filepath.Join(b.dir, app+".stderr")
	errf, err := os.Create(logPath)
	if err != nil {
		return r, err
	}
	defer errf.Close()
	cmd.Stderr = errf
	if err := cmd.Start(); err != nil {
		return r, fmt.Errorf("start java: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	waitErr := b.waitCounts(tail, in.want, exited)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
	if waitErr != nil {
		return r, fmt.Errorf("%w (the application's log: %s)", waitErr, logPath)
	}
	if err := parseStreamsStats(stdout.String(), &r); err != nil {
		return r, fmt.Errorf("%w (the application's log: %s)", err, logPath)
	}
	final, err := readOutput(b.brokers, out, in.partitions)
	if err != nil {
		return r, err
	}
	if r.counts = compareCounts(final, in.want); r.counts == "" {
		r.counts = "exact"
	}
	return r, nil
}

func (b *bench) streamsCommand(topic, out, app string, threads int) *exec.Cmd {
	target := filepath.Join(b.appDir, "target")
	cp := filepath.Join(target, "streams-count.jar") + string(os.PathListSeparator) + filepath.Join(target, "lib", "*")
	return exec.Command("java", "-Xmx512m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", cp, "keyshare.streams.CountApp",
		"--brokers", b.brokers, "--input", topic, "--output", out, "--app-id", app,
		"--threads", strconv.Itoa(threads), "--state-dir", filepath.Join(b.dir, app+"-state"),
		"--lookup-us", strconv.FormatInt(b.lookup.Microseconds(), 10))
}

// waitCounts follows the output until every key's count reaches its
// records; it gives up when the application exits or the counts stall.
func (b *bench) waitCounts(tail *outputReader, want map[string]int, exited <-chan error) error {
	moved := time.Now()
	for !reached(tail.counts, want) {
		select {
		case err := <-exited:
			return fmt.Errorf("the Streams application exited before its counts were complete: %v", err)
		default:
		}
		n, err := tail.poll(time.Second)
		if err != nil {
			return err
		}
		if n > 0 {
			moved = time.Now()
		} else if time.Since(moved) > b.stall {
			return fmt.Errorf("no new count for %s, %d of %d keys complete", b.stall, complete(tail.counts, want), len(want))
		}
	}
	return nil
}

func complete(got map[string]int64, want map[string]int) int {
	n := 0
	for k, c := range want {
		if got[k] >= int64(c) {
			n++
		}
	}
	return n
}

// parseStreamsStats reads CountApp's last line: handled N first_us F last_us L.
func parseStreamsStats(stdout string, r *row) error {
	var first, last int64
	if _, err := fmt.Sscanf(stdout, "handled %d first_us %d last_us %d", &r.handled, &first, &last); err != nil {
		return fmt.Errorf("the Streams application printed %q, not its handled records and times: %w", stdout, err)
	}
	r.elapsed = time.Duration(last-first) * time.Microsecond
	return nil
}

// outputReader follows the Streams application's output topic (committed
// transactions only) and keeps each key's latest count.
type outputReader struct {
	c      *kafka.Consumer
	topic  string
	counts map[string]int64
	eof    map[int32]bool
}

func newOutputReader(brokers, topic string, partitions int32) (*outputReader, error) {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers": brokers, "group.id": "streamsbench-reader", "log_level": 3,
		"isolation.level": "read_committed", "enable.partition.eof": true,
		"enable.auto.commit": false, "auto.offset.reset": "earliest",
	})
	if err != nil {
		return nil, err
	}
	var tps []kafka.TopicPartition
	for p := range partitions {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.OffsetBeginning})
	}
	if err := c.Assign(tps); err != nil {
		c.Close()
		return nil, err
	}
	return &outputReader{c: c, topic: topic, counts: map[string]int64{}, eof: map[int32]bool{}}, nil
}

// poll reads for up to d and returns how many counts it read.
func (o *outputReader) poll(d time.Duration) (int, error) {
	n := 0
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		switch ev := o.c.Poll(100).(type) {
		case *kafka.Message:
			if len(ev.Value) != 8 {
				return n, fmt.Errorf("%s: key %q has a count of %d bytes, not an 8-byte long", o.topic, ev.Key, len(ev.Value))
			}
			o.counts[string(ev.Key)] = int64(binary.BigEndian.Uint64(ev.Value))
			o.eof[ev.TopicPartition.Partition] = false
			n++
		case kafka.PartitionEOF:
			o.eof[ev.Partition] = true
		case kafka.Error:
			if ev.IsFatal() {
				return n, ev
			}
		}
	}
	return n, nil
}

func (o *outputReader) close() { o.c.Close() }

// readOutput reads the output topic from its start to its end: the final
// count of each key.
func readOutput(brokers, topic string, partitions int32) (map[string]int64, error) {
	o, err := newOutputReader(brokers, topic, partitions)
	if err != nil {
		return nil, err
	}
	defer o.close()
	for deadline := time.Now().Add(time.Minute); ; {
		if _, err := o.poll(200 * time.Millisecond); err != nil {
			return nil, err
		}
		all := true
		for p := range partitions {
			all = all && o.eof[p]
		}
		if all {
			return o.counts, nil
		}
		if time.Now().After(deadline) {
			return nil, errors.New("read " + topic + ": not at its end after a minute")
		}
	}
}
