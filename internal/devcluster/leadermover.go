package devcluster

import (
	"bufio"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// leaderMoverSource is a Java program run with Java's single-file source
// launcher: Kafka's own Admin client, which can reorder a partition's
// replicas (AlterPartitionReassignments); confluent-kafka-go 2.11 cannot.
//
//go:embed LeaderMover.java
var leaderMoverSource []byte

// leaderMoverLog4j keeps the Admin client's log off stdout, which carries
// the answers.
const leaderMoverLog4j = `status = warn
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = err
`

// LeaderMover moves partition leaderships of an ApacheKafka cluster while
// every node keeps running. It is one JVM, started by NewLeaderMover and
// ended by Close; its methods are safe for concurrent use.
type LeaderMover struct {
	mu  sync.Mutex
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

// NewLeaderMover starts the helper JVM (its log in Dir/leadermover.log)
// and waits until it is ready.
func (k *ApacheKafka) NewLeaderMover() (*LeaderMover, error) {
	src := filepath.Join(k.o.Dir, "LeaderMover.java")
	logCfg := filepath.Join(k.o.Dir, "leadermover-log4j2.properties")
	if err := os.WriteFile(src, leaderMoverSource, 0o644); err != nil {
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	if err := os.WriteFile(logCfg, []byte(leaderMoverLog4j), 0o644); err != nil {
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(k.o.Dir, "leadermover.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	defer logf.Close() // the child has its own descriptor
	args := append([]string{"-Xmx128m"}, jvmFlags...)
	args = append(args, "-cp", filepath.Join(k.lib, "*"), "-Dlog4j2.configurationFile="+logCfg, src, k.Brokers())
	cmd := exec.Command(k.java, args...)
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("devcluster: start leader mover: %w", err)
	}
	m := &LeaderMover{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	ready := make(chan error, 1)
	go func() {
		if m.out.Scan() && m.out.Text() == "ready" {
			ready <- nil
			return
		}
		ready <- fmt.Errorf("devcluster: leader mover did not start (%v); see %s", m.out.Err(), logf.Name())
	}()
	select {
	case err = <-ready:
	case <-time.After(k.o.StartTimeout):
		err = fmt.Errorf("devcluster: leader mover not ready after %s; see %s", k.o.StartTimeout, logf.Name())
	}
	if err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// Move makes another in-sync replica the leader of topic's partition (the
// next one after the leader in replica order) and waits until the
// cluster's metadata shows it: it reorders the replicas so that the new
// leader comes first and the old one last, and runs a preferred leader
// election. Repeated, the leadership goes round every in-sync replica. It returns the
// old and new leaders' node ids (1-based, as in server.properties).
func (m *LeaderMover) Move(topic string, partition int32) (from, to int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := fmt.Fprintf(m.in, "%s %d\n", topic, partition); err != nil {
		return 0, 0, fmt.Errorf("devcluster: leader mover: %w", err)
	}
	if !m.out.Scan() {
		return 0, 0, fmt.Errorf("devcluster: leader mover exited: %v", m.out.Err())
	}
	line := m.out.Text()
	if msg, ok := strings.CutPrefix(line, "err "); ok {
		return 0, 0, fmt.Errorf("devcluster: move leader of %s/%d: %s", topic, partition, msg)
	}
	if _, err := fmt.Sscanf(line, "ok %d %d", &from, &to); err != nil {
		return 0, 0, fmt.Errorf("devcluster: leader mover answered %q", line)
	}
	return from, to, nil
}

// Close ends the helper JVM.
func (m *LeaderMover) Close() {
	_ = m.in.Close()
	_ = m.cmd.Process.Kill()
	_ = m.cmd.Wait()
}
