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
	"strings"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/internal/devcluster"
)

// runStreams runs CountApp on in with s.parallel stream threads until its
// output holds every key's count, stops it, and reads the final counts.
// With --crash it kills the application (SIGKILL) once that share of the
// counts is out, and starts it again on the same state directory.
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
	logPath := filepath.Join(b.dir, app+".stderr")
	if b.crashAt > 0 {
		p, err := b.startStreams(in.topic, out, app, s.parallel, logPath)
		if err != nil {
			return r, err
		}
		share := int64(b.crashAt * float64(in.records))
		err = b.waitCounts(tail, func(c map[string]int64) bool { return sum(c) >= share }, in.want, p.exited)
		// Counts come out at a commit: killed at once, the application
		// would die just after one, with nothing to handle again.
		time.Sleep(killDelay)
		p.kill()
		if err != nil {
			return r, fmt.Errorf("%w (the application's log: %s)", err, logPath)
		}
		b.logf("  killed the application with %d of %d counts out; starting it again", sum(tail.counts), in.records)
	}
	p, err := b.startStreams(in.topic, out, app, s.parallel, logPath)
	if err != nil {
		return r, err
	}
	waitErr := b.waitCounts(tail, func(c map[string]int64) bool { return reached(c, in.want) }, in.want, p.exited)
	p.stop()
	if waitErr != nil {
		return r, fmt.Errorf("%w (the application's log: %s)", waitErr, logPath)
	}
	if b.crashAt > 0 {
		// Two instances, one killed: no time from first to last, and
		// the handlings of the killed one are not known.
		r.handled = -1
	} else {
		st, err := parseStreamsStats(p.stdout.String())
		if err != nil {
			return r, fmt.Errorf("%w (the application's log: %s)", err, logPath)
		}
		r.handled, r.elapsed = st.handled, time.Duration(st.last-st.first)*time.Microsecond
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

// killDelay is how long after the crash run's share of counts is out the
// application is killed: half of at_least_once's commit interval in
// CountApp (1 s), so the kill falls between two commits.
const killDelay = 500 * time.Millisecond

// streamsProc is one running CountApp.
type streamsProc struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer // read only once exited is closed
	exited chan struct{}
	err    error // Wait's, set before exited is closed
}

func (b *bench) startStreams(topic, out, app string, threads int, logPath string) (*streamsProc, error) {
	p := &streamsProc{cmd: b.streamsCommand(topic, out, app, threads), exited: make(chan struct{})}
	errf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, errf
	if err := p.cmd.Start(); err != nil {
		errf.Close()
		return nil, fmt.Errorf("start java: %w", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		errf.Close()
		close(p.exited)
	}()
	return p, nil
}

// stop asks the application to close (SIGTERM: Streams commits what it
// processed) and waits for it, killing it after 90 s.
func (p *streamsProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(90 * time.Second):
		p.kill()
	}
}

// kill ends the application as a crash would.
func (p *streamsProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

func (b *bench) streamsCommand(topic, out, app string, threads int) *exec.Cmd {
	target := filepath.Join(b.appDir, "target")
	cp := filepath.Join(target, "streams-count.jar") + string(os.PathListSeparator) + filepath.Join(target, "lib", "*")
	args := []string{"-Xmx512m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", cp, "keyshare.streams.CountApp",
		"--brokers", b.brokers, "--input", topic, "--output", out, "--app-id", app,
		"--threads", strconv.Itoa(threads), "--state-dir", filepath.Join(b.dir, app+"-state"),
		"--lookup-us", strconv.FormatInt(b.lookup.Microseconds(), 10), "--guarantee", b.guarantee}
	if b.cacheBytes >= 0 {
		args = append(args, "--cache-bytes", strconv.FormatInt(b.cacheBytes, 10))
	}
	return exec.Command("java", args...)
}

// waitCounts follows the output until done holds for the counts; it gives
// up when the application exits or the counts stall.
func (b *bench) waitCounts(tail *outputReader, done func(map[string]int64) bool, want map[string]int, exited <-chan struct{}) error {
	moved := time.Now()
	for !done(tail.counts) {
		select {
		case <-exited:
			return fmt.Errorf("the Streams application exited before its counts were complete")
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

func sum(counts map[string]int64) int64 {
	var n int64
	for _, c := range counts {
		n += c
	}
	return n
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

// streamsStats is what CountApp prints: "first_us F" when its first
// lookup starts, "handled N last_us L" when it has closed.
type streamsStats struct {
	first, last, handled int64
}

func parseStreamsStats(stdout string) (streamsStats, error) {
	var st streamsStats
	var seen int
	for _, l := range strings.Split(stdout, "\n") {
		if _, err := fmt.Sscanf(l, "first_us %d", &st.first); err == nil {
			seen |= 1
		} else if _, err := fmt.Sscanf(l, "handled %d last_us %d", &st.handled, &st.last); err == nil {
			seen |= 2
		}
	}
	if seen != 3 {
		return st, fmt.Errorf("the Streams application printed %q, not its first lookup's time and its handled records", stdout)
	}
	return st, nil
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
