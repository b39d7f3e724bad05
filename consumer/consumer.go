package consumer

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/coord"
)

// Consumer is one keyshare member: it joins the group in etcd, fetches the
// partitions where it owns hash ranges, runs their records through the
// handler (one key at a time, keys in parallel) and records completion.
type Consumer struct {
	cli *clientv3.Client
	cfg Config
	log hclog.Logger

	kc       *kafka.Consumer
	dlq      *kafka.Producer
	logsDone chan struct{} // closed when librdkafka's log channel is drained
	dlqLogs  chan struct{} // the same for the dead-letter producer
	// deadLetters writes the dead letters with dlq (deadletter_seam.go);
	// nil with dlq.
	deadLetters deadLetterWriter
	// parking is the producer of parked records (park.go), made at the
	// first park.
	parking struct {
		mu   sync.Mutex
		p    *kafka.Producer
		logs chan struct{}
	}

	problems problems // calls being retried (retry.go), for /readyz and the log
	spans    spans    // nil unless Config.TracerProvider is set (spans.go)

	metrics struct {
		handled, failed, retried, deadLettered, flushes, flushBytes, fetched, shelved, commits, commitRepairs, retentionLosses, loadReports, loadReportErrors atomic.Int64

		// Dead letters (deadletter_seam.go): writes failed and tried again,
		// and copies sent without their value as too large.
		deadLetterErrors, deadLetterReduced atomic.Int64
	}
	registry                     *prometheus.Registry
	flushSeconds, handoffSeconds prometheus.Histogram
	batchRecords                 prometheus.Histogram // records per BatchHandler call (batch.go)

	mu struct {
		sync.Mutex
		p       *pipeline // the current session's pipeline
		sess    *coord.Session
		running bool
		stopped bool // Run has returned
		closed  bool
		cancel  context.CancelFunc // ends the running Run's context
		done    chan struct{}      // closed when Run returns
		// partitions is what the leader last learned (for metrics).
		partitions  map[tp]partitionGauges
		metricsAddr string
	}
}

// New returns a Consumer; it checks cfg but contacts nothing until Run.
func New(cli *clientv3.Client, cfg Config) (*Consumer, error) {
	if cli == nil {
		return nil, configErr("etcd client is nil: pass the service's *clientv3.Client")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MemberID == "" {
		cfg.MemberID = coord.DefaultMemberID()
	}
	c := &Consumer{cli: cli, cfg: cfg, log: cfg.Logger.Named("consumer"), spans: newSpans(cfg.TracerProvider, cfg.Group)}
	c.registry = c.newRegistry()
	return c, nil
}

// ID is the member id.
func (c *Consumer) ID() string { return c.cfg.MemberID }

// Run joins the group and consumes until ctx ends, then leaves gracefully:
// its ranges are revoked and handed over after their in-flight records
// finish, so no record runs twice. If the etcd session is lost, Run drops
// all work at once (another member may own the ranges now) and joins again,
// as often as it takes. With etcd unreachable a leave cannot hand anything
// over; Run then returns a few seconds after the session ends (within
// SessionTTL) and the ranges fail over.
//
// What Kafka and etcd answer while they start, restart, move a group
// coordinator or elect a leader, and brokers or etcd not reachable yet,
// Run retries with backoff for as long as it runs (each attempt bounded by
// StartTimeout), logging each problem once a minute; /readyz says not
// ready meanwhile. Run returns the errors no retry can fix, as soon as it
// meets them: a bad configuration, a missing topic, a refused login or
// permission, a member id in use, topics that differ from the group's
// (*coord.TopicsDifferError), a live plain consumer group on the group id.
// If ctx ends before the member has joined, Run returns nil. Close ends Run
// the same way as ending ctx does. A Consumer runs once.
func (c *Consumer) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.mu.Lock()
	if c.mu.running || c.mu.closed {
		c.mu.Unlock()
		return errors.New("consumer: Run called twice or after Close")
	}
	c.mu.running = true
	c.mu.cancel, c.mu.done = cancel, make(chan struct{})
	done := c.mu.done
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.mu.stopped = true
		c.mu.Unlock()
		close(done)
	}()

	if c.cfg.MetricsAddr != "" {
		stop, err := c.serveMetrics(ctx)
		if err != nil {
			return err
		}
		defer stop()
	}
	if err := c.openKafka(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting: nothing joined, nothing to leave
		}
		return err
	}
	defer c.closeKafka()

	first, wait := true, retryMin
	for {
		cc := c.cfg.coordConfig(c.partitionCounts)
		ko := c.commitOffsets()
		cc.Offsets, cc.CommitInterval, cc.OnCommitRound = ko, c.cfg.CommitInterval, c.onCommitRound
		cc.TopicIDs = topicIDs{c}
		sess, err := coord.Join(ctx, c.cli, cc)
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped while joining
			}
			// The first join fails Run only on what no retry fixes
			// (credentials, permissions, a member id in use). A
			// rejoin can find our own old registration still alive
			// (this side gave the session up, etcd has not expired
			// the lease yet): it goes within one TTL, so keep trying.
			if first && !etcdTransient(err) {
				return err
			}
			c.problems.report(c.memberLog(), joinProblem, err)
			if first {
				sleep(ctx, wait/2+rand.N(wait/2+1))
				wait = min(2*wait, retryMax)
			} else {
				sleep(ctx, time.Second)
			}
			continue
		}
		c.problems.resolve(joinProblem, c.memberLog())
		first = false
		err = c.serve(ctx, sess)
		ko.wait() // a commit librdkafka still runs ends before its client closes
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		c.log.Warn("session lost; rejoining with a new session")
	}
}

// serve runs one session's pipeline until the session is lost or ctx ends
// (then it leaves gracefully).
func (c *Consumer) serve(ctx context.Context, sess *coord.Session) error {
	p := newPipeline(c, sess)
	c.mu.Lock()
	c.mu.p, c.mu.sess = p, sess
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.mu.p, c.mu.sess = nil, nil
		c.mu.Unlock()
	}()

	fetchErr := make(chan error, 1)
	p.goFunc(func() { fetchErr <- p.fetchLoop() })
	p.goFunc(p.flushLoop)
	p.goFunc(p.watchStuck)
	p.goFunc(p.reportLoad)
	p.goFunc(p.watchKeyOps)

	var err error
	select {
	case <-ctx.Done():
		c.leave(p, sess)
	case <-sess.Ctx().Done():
		// Self-fencing: another member may own our ranges by now.
		p.log.Warn("session lost: dropping all ranges and in-flight work")
	case err = <-fetchErr:
		p.log.Error("fetch loop failed", "error", err)
	}
	p.stop()
	p.sched.Close()
	p.wg.Wait()
	_ = sess.Close()
	return err
}

// leave hands every range over: mark leaving, keep serving revocations until
// no range is left (or no other member remains), then finish in-flight work
// and write the final state. It gives up when the session ends: the ranges
// then go to others by failover, and with etcd unreachable nothing here
// could reach it anyway. So with etcd down a leave ends within SessionTTL
// (the session's deadline), plus a final flush of at most 5 s.
func (c *Consumer) leave(p *pipeline, sess *coord.Session) {
	lctx, cancel := context.WithTimeout(context.Background(), c.cfg.DrainTimeout+c.cfg.SessionTTL)
	defer cancel()
	defer context.AfterFunc(sess.Ctx(), cancel)()
	if err := sess.Leave(lctx); err != nil {
		p.log.Warn("leave", "error", err)
		return
	}
	if err := sess.WaitReleased(lctx); err != nil {
		p.log.Warn("ranges not handed over in time; the leader reassigns them when the session ends", "error", err)
	}
	// Whatever is still owned (no other member): stop fetching, finish
	// what is in flight, write the final state.
	p.mu.Lock()
	p.mu.fetching = false
	deadline := time.Now().Add(c.cfg.DrainTimeout)
	wake := time.AfterFunc(c.cfg.DrainTimeout, func() { p.mu.Lock(); p.mu.cond.Broadcast(); p.mu.Unlock() })
	for p.mu.inflight > 0 && time.Now().Before(deadline) && sess.Ctx().Err() == nil {
		p.mu.cond.Wait()
	}
	wake.Stop()
	p.mu.Unlock()
	fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
	p.flush(fctx)
	fcancel()
	p.log.Info("left group")
}

// Close stops the Consumer. If Run is running, Close ends it as ending its
// context would — the member leaves gracefully, handing its ranges over —
// and waits for Run to return; afterwards Run refuses to start. Close is
// idempotent and safe to call from any goroutine except a handler of this
// Consumer (it waits for in-flight records, a handler's own among them).
func (c *Consumer) Close() error {
	c.mu.Lock()
	c.mu.closed = true
	cancel, done := c.mu.cancel, c.mu.done
	c.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	return nil
}

// joinProblem names the join for retry's log and /readyz.
const joinProblem = "join the group in etcd"
