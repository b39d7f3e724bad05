package devcluster

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// One node's JVM: its files, starting it, waiting for it to serve, and
// stopping and restarting it.

// kafkaNode is one node of the cluster: a combined broker and controller
// in a JVM of its own, in a directory of its own.
type kafkaNode struct {
	id               int // node.id, 1-based
	dir              string
	host             string
	port, ctrlPort   int
	proc             *os.Process // nil while stopped
	exited           chan struct{}
	waitErr          error
	userChosenListen bool
}

func (nd *kafkaNode) properties() string { return filepath.Join(nd.dir, "server.properties") }
func (nd *kafkaNode) dataDir() string    { return filepath.Join(nd.dir, "data") }
func (nd *kafkaNode) logPath() string    { return filepath.Join(nd.dir, "server.log") }
func (nd *kafkaNode) addr() string       { return net.JoinHostPort(nd.host, strconv.Itoa(nd.port)) }

// start starts the node's JVM, its output appended to server.log. The JVM
// is killed if this process dies (Pdeathsig); Pdeathsig fires when the
// thread that started the child exits, so that thread is locked to a
// goroutine that lives as long as the child. The JVM gets its own process
// group, so a terminal's Ctrl-C reaches only keyshare, which then stops it.
func (nd *kafkaNode) start(java, lib, log4j string) error {
	logf, err := os.OpenFile(nd.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("devcluster: %w", err)
	}
	args := append([]string{"-Xmx512m"}, jvmFlags...)
	args = append(args, "-cp", filepath.Join(lib, "*"), "-Dlog4j2.configurationFile="+log4j, "kafka.Kafka", nd.properties())
	cmd := exec.Command(java, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	exited := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		defer logf.Close()
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("devcluster: start kafka node %d (%s): %w", nd.id, java, err)
			return
		}
		started <- nil
		err := cmd.Wait()
		nd.waitErr = err // read only after exited is closed
		close(exited)
	}()
	if err := <-started; err != nil {
		return err
	}
	nd.proc, nd.exited = cmd.Process, exited
	return nil
}

// portInUseError: a node could not bind its ports.
type portInUseError struct{ error }

// waitServing waits until node nd accepts connections and the cluster's
// metadata lists it, or its JVM exits, or deadline passes.
func (k *ApacheKafka) waitServing(nd *kafkaNode, deadline time.Time) error {
	k.mu.Lock()
	exited := nd.exited
	k.mu.Unlock()
	fail := func(what string) error {
		tail := logTail(nd.logPath(), 30)
		err := fmt.Errorf("devcluster: kafka node %d on %s %s; its log is %s, ending:\n%s", nd.id, nd.addr(), what, nd.logPath(), tail)
		if strings.Contains(tail, "Address already in use") && !nd.userChosenListen {
			return portInUseError{err}
		}
		if strings.Contains(tail, "Address already in use") {
			return fmt.Errorf("%w (is the port in use? choose another address)", err)
		}
		return err
	}
	// until polls cond every 100 ms until it holds, the JVM exits, or the
	// deadline passes (then the failure says what was not reached).
	until := func(what string, cond func() bool) error {
		for {
			select {
			case <-exited:
				return fail(fmt.Sprintf("exited while starting (%v)", nd.waitErr))
			default:
			}
			if time.Now().After(deadline) {
				return fail(fmt.Sprintf("%s after %s", what, k.o.StartTimeout))
			}
			if cond() {
				return nil
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if err := until("not serving", func() bool {
		c, err := net.DialTimeout("tcp", nd.addr(), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}); err != nil {
		return err
	}
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": nd.addr(), "log_level": 0})
	if err != nil {
		return fmt.Errorf("devcluster: admin client: %w", err)
	}
	defer a.Close()
	return until("not in the cluster's metadata", func() bool {
		md, err := a.GetMetadata(nil, false, 2000)
		if err != nil {
			return false
		}
		for _, b := range md.Brokers {
			if int(b.ID) == nd.id {
				return true
			}
		}
		return false
	})
}

// logTail returns the last n lines of the file at path.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (k *ApacheKafka) node(i int) (*kafkaNode, error) {
	if i < 0 || i >= len(k.nodes) {
		return nil, fmt.Errorf("devcluster: no kafka node %d (there are %d, numbered from 0)", i, len(k.nodes))
	}
	return k.nodes[i], nil
}

// Kill stops node i (0-based) as a crash would: SIGKILL. Its data stays
// for Restart.
func (k *ApacheKafka) Kill(i int) error { return k.stop(i, syscall.SIGKILL, 0) }

// Stop stops node i gracefully (SIGTERM: controlled shutdown), killing it
// if it has not exited within 30 s.
func (k *ApacheKafka) Stop(i int) error { return k.stop(i, syscall.SIGTERM, 30*time.Second) }

func (k *ApacheKafka) stop(i int, sig syscall.Signal, grace time.Duration) error {
	k.mu.Lock()
	nd, err := k.node(i)
	if err != nil {
		k.mu.Unlock()
		return err
	}
	proc, exited := nd.proc, nd.exited
	nd.proc = nil
	k.mu.Unlock()
	if proc == nil {
		return fmt.Errorf("devcluster: kafka node %d is already stopped", i)
	}
	stopProc(proc, exited, sig, grace)
	return nil
}

func stopProc(p *os.Process, exited chan struct{}, sig syscall.Signal, grace time.Duration) {
	_ = p.Signal(sig)
	if sig != syscall.SIGKILL {
		select {
		case <-exited:
			return
		case <-time.After(grace):
		}
		_ = p.Kill()
	}
	<-exited
}

// Restart starts stopped node i again from its data on its old ports and
// waits until it serves.
func (k *ApacheKafka) Restart(i int) error {
	k.mu.Lock()
	nd, err := k.node(i)
	if err == nil && nd.proc != nil {
		err = fmt.Errorf("devcluster: kafka node %d is running; Kill or Stop it before Restart", i)
	}
	if err == nil {
		err = nd.start(k.java, k.lib, k.log4jConfig())
	}
	k.mu.Unlock()
	if err != nil {
		return err
	}
	return k.waitServing(nd, time.Now().Add(k.o.StartTimeout))
}
