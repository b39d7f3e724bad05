package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/keyshare/keyshare/schema"
)

// demoRun is one demo against its bundled cluster: the member processes,
// the clients that read the group's status, and the live view.
type demoRun struct {
	c                *demoCommand
	self, dir        string // this binary, which the members run; the work directory
	etcdURL, brokers string
	ep               *demoEndpoint
	view             *liveView
	procs            map[string]*exec.Cmd // live members by id
	etcd             *clientv3.Client
	kc               *kafka.Consumer
	killed, added    bool // the failover and scale-out steps have happened
}

// startMember starts member id delivering to the demo's endpoint.
func (r *demoRun) startMember(id string) error {
	metrics, err := freeAddr()
	if err != nil {
		return err
	}
	args := []string{"member", "--brokers", r.brokers, "--etcd", r.etcdURL, "--group", demoGroup, "--topic", demoTopic,
		"--id", id, "--ttl", "2s", "--drain-timeout", "10s", "--log-level", "warn", "--deliver", r.ep.url, "--metrics-addr", metrics}
	cmd := exec.Command(r.self, args...)
	logf, err := os.Create(filepath.Join(r.dir, id+".log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	r.procs[id] = cmd
	r.view.event("started member %s (pid %d), metrics at http://%s/metrics", id, cmd.Process.Pid, metrics)
	return nil
}

// killMembers kills the members still running, on the way out.
func (r *demoRun) killMembers() {
	for _, p := range r.procs {
		_ = p.Process.Kill()
		_ = p.Wait()
	}
}

// connect opens the etcd and Kafka clients the status is read with.
func (r *demoRun) connect() error {
	var err error
	r.etcd, err = clientv3.New(clientv3.Config{Endpoints: []string{r.etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	r.kc, err = kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": r.brokers, "group.id": demoGroup, "log_level": 3})
	if err != nil {
		r.etcd.Close()
		return err
	}
	return nil
}

func (r *demoRun) status(ctx context.Context) (*groupStatus, error) {
	return readStatus(ctx, r.etcd, r.kc, schema.Group{Prefix: schema.DefaultPrefix, Name: demoGroup})
}

// watch shows the group each second, kills a member and adds one on the
// way, until the producer has finished and every partition's committed
// offset has reached its end, or until a deadline.
func (r *demoRun) watch(ctx context.Context, prodDone <-chan error) error {
	began := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	produced := false
	deadline := began.Add(2*r.c.duration + 60*time.Second)
	for {
		select {
		case <-ctx.Done():
			return errors.New("interrupted")
		case err := <-prodDone:
			if err != nil {
				return fmt.Errorf("producer: %w", err)
			}
			produced = true
			r.view.event("producer finished: %d records", r.c.records)
		case <-tick.C:
		}
		if err := r.disturb(time.Since(began)); err != nil {
			return err
		}
		st, err := r.status(ctx)
		if err != nil {
			r.view.event("status: %v", err)
			continue
		}
		committed, end, atEnd := committedTotals(st)
		r.view.frame(st, end, committed)
		if produced && atEnd {
			return nil
		}
		if time.Now().After(deadline) {
			r.view.event("gave up waiting for the committed offset to reach the end")
			return nil
		}
	}
}

// disturb SIGKILLs member m2 at 35% of the production time and adds a
// member at 55%, elapsed being the time since production began.
func (r *demoRun) disturb(elapsed time.Duration) error {
	if !r.killed && elapsed > r.c.duration*35/100 {
		r.killed = true
		victim := "m2"
		_ = r.procs[victim].Process.Signal(syscall.SIGKILL)
		_ = r.procs[victim].Wait()
		delete(r.procs, victim)
		r.view.event("SIGKILL member %s: its ranges fail over when its lease (2s) expires", victim)
	}
	if !r.added && elapsed > r.c.duration*55/100 {
		r.added = true
		return r.startMember(fmt.Sprintf("m%d", r.c.members+1))
	}
	return nil
}

// committedTotals sums the partitions' committed and end offsets, and says
// whether every partition's committed offset is known and at its end.
func committedTotals(st *groupStatus) (committed, end int64, atEnd bool) {
	atEnd = true
	for _, p := range st.Partitions {
		if p.Committed != nil {
			committed += *p.Committed
		}
		if p.End != nil {
			end += *p.End
		}
		if p.Committed == nil || p.End == nil || *p.Committed != *p.End {
			atEnd = false
		}
	}
	return committed, end, atEnd
}

// finish prints the group's table, read while the members still hold
// their ranges; then the members leave gracefully and the record logs are
// checked against what the group committed.
func (r *demoRun) finish(ctx context.Context) error {
	final, err := r.status(ctx)
	if err != nil {
		return err
	}
	for id, p := range r.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
		_ = p.Wait()
		delete(r.procs, id)
	}
	st, err := r.status(ctx)
	if err != nil {
		return err
	}
	fmt.Println()
	printStatus(os.Stdout, final)
	v, err := verify(r.dir, st)
	if err != nil {
		return err
	}
	fmt.Printf("\nverified from the endpoint's record logs:\n")
	fmt.Printf("  produced           %d\n  handled            %d (distinct %d)\n  lost               %d (must be 0)\n  duplicates         %d (allowed after the SIGKILL: records the killed member finished since its last flush)\n  order violations   %d (must be 0)\n  committed == end   %v\n",
		v.produced, v.lines, v.distinct, v.lost, v.lines-v.distinct, v.orderViolations, v.committedAtEnd)
	fmt.Printf("  over HTTP          %s\n", r.ep.summary())
	if r.c.keep {
		fmt.Printf("  logs in          %s\n", r.dir)
	}
	if v.lost > 0 || v.orderViolations > 0 || !v.committedAtEnd {
		return errors.New("a guarantee was broken (see above)")
	}
	fmt.Println("\nall guarantees held.")
	return nil
}
