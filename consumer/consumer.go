package consumer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
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
	// parking is the producer of parked records (park.go), made at the
	// first park.
	parking struct {
		mu   sync.Mutex
		p    *kafka.Producer
		logs chan struct{}
	}

	problems problems // calls being retried (retry.go), for /readyz and the log
	tracing  *tracing // nil unless Config.TracerProvider is set (tracing.go)

	metrics struct {
		handled, failed, retried, deadLettered, flushes, flushBytes, fetched, shelved, commits, commitRepairs, retentionLosses, loadReports, loadReportErrors atomic.Int64

		// Dead letters (deadletter.go): writes failed and tried again,
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
	c := &Consumer{cli: cli, cfg: cfg, log: cfg.Logger.Named("consumer"), tracing: newTracing(cfg.TracerProvider, cfg.Group)}
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

// kafkaConfig is the librdkafka configuration of the member's consumer:
// Config.Kafka, the settings keyshare controls, and keyshare's defaults
// (kafkaDefaults) for what Config.Kafka leaves unset.
//
// librdkafka's own defaults stand for the rest, fetch.wait.max.ms (500 ms)
// among them. keyshare set it to 100 ms for a while, so that a partition
// taken over was fetched sooner (librdkafka keeps one fetch in flight per
// broker, and the broker holds a fetch that finds nothing new that long).
// On kfake that shortened some leaves at P = 4,096; on Apache Kafka it
// did not, and the broker's CPU at idle with a 4,096-partition group went
// from 0.13–0.15 of a core to 0.37–0.57 (librdkafka sends the whole
// partition list in every fetch; docs/benchmarks.md).
// kafkaDefaults are the librdkafka settings keyshare gives its consumer
// unless Config.Kafka sets them.
//
// fetch.queue.backoff.ms: once librdkafka's queue holds
// queued.min.messages records (100,000), it stops fetching a partition
// for this long, 1 s by default. A member that drains the queue in less
// than that then waits for the rest of the second: on one partition of
// small records on Apache Kafka, a bare poll loop read 130,000 records/s
// with the default and 507,000–636,000 with 10–50 ms, as fast as with
// queued.min.messages raised tenfold, and a member read 105,000 and
// 163,000–174,000 (docs/benchmarks.md, section 0). The queue's bounds, and so
// librdkafka's memory, stay as they are; the broker sees no more fetches
// per record. The cost is the client's: while the queue stays full and the
// partitions are not paused (keyshare pauses them after pauseAfter at its
// in-flight bound), librdkafka looks at each partition every 50 ms instead
// of every second.
var kafkaDefaults = kafka.ConfigMap{
	"fetch.queue.backoff.ms": 50,
}

func kafkaConfig(cfg Config) kafka.ConfigMap {
	cm := kafka.ConfigMap{}
	for k, v := range cfg.Kafka {
		cm[k] = v
	}
	for k, v := range kafkaDefaults {
		if _, set := cm[k]; !set {
			cm[k] = v
		}
	}
	cm["group.id"] = cfg.Group
	cm["enable.auto.commit"] = false
	cm["enable.auto.offset.store"] = false
	cm["auto.offset.reset"] = "error"
	cm["enable.partition.eof"] = true // the end of the log moves the ledger past markers (gaps.go)
	cm["go.logs.channel.enable"] = true
	return cm
}

func (c *Consumer) openKafka(ctx context.Context) error {
	cm := kafkaConfig(c.cfg)
	kc, err := kafka.NewConsumer(&cm)
	if err != nil {
		return fmt.Errorf("consumer: create Kafka consumer: %w", err)
	}
	c.kc = kc
	c.logsDone = make(chan struct{})
	go func() {
		defer close(c.logsDone)
		forwardLogs(c.log.Named("librdkafka"), kc.Logs())
	}()
	sctx, stop := c.watchRefusals(ctx)
	err = c.checkTopics(sctx)
	if err == nil {
		err = c.checkPlainGroup(sctx)
	}
	stop()
	if err != nil {
		c.closeKafka()
		return err
	}
	if c.cfg.DeadLetterTopic != "" {
		p, logsDone, err := newDeadLetterProducer(c.cfg.Kafka, c.log.Named("librdkafka").Named("dlq"))
		if err != nil {
			c.closeKafka()
			return err
		}
		c.dlq, c.dlqLogs = p, logsDone
	}
	return nil
}

func (c *Consumer) closeKafka() {
	c.closeParking()
	if c.dlq != nil {
		c.dlq.Flush(5000)
		c.dlq.Close() // closes the log channel
		<-c.dlqLogs
		c.dlq = nil
	}
	if c.kc != nil {
		_ = c.kc.Close() // closes the log channel
		<-c.logsDone
		c.kc = nil
	}
}

// joinProblem names the join for retry's log and /readyz.
const joinProblem = "join the group in etcd"

// watchRefusals reads the Kafka consumer's events while the member starts
// (nothing else polls it yet), and cancels the returned context with a
// refused login when librdkafka reports one: the requests the start
// makes only wait for the broker until their timeout, while the refusal
// arrives at once as an event. stop ends the watch and waits for it.
func (c *Consumer) watchRefusals(ctx context.Context) (sctx context.Context, stop func()) {
	sctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var seen refusals
		for sctx.Err() == nil {
			ke, ok := c.kc.Poll(100).(kafka.Error)
			if !ok {
				continue
			}
			if err := seen.add(ke); err != nil {
				cancel(fmt.Errorf("consumer: Kafka brokers %v refused this client: %w", c.cfg.Kafka["bootstrap.servers"], err))
				return
			}
			c.log.Debug("kafka", "error", ke)
		}
	}()
	return sctx, func() {
		cancel(nil)
		<-done
	}
}

// checkTopics makes sure every topic (and the dead-letter topic) exists:
// one Metadata request, retried until Kafka answers (retry.go). A topic
// Kafka says does not exist ends the start.
func (c *Consumer) checkTopics(ctx context.Context) error {
	topics := c.cfg.Topics
	if c.cfg.DeadLetterTopic != "" {
		topics = append(slices.Clip(topics), c.cfg.DeadLetterTopic)
	}
	return c.retry(ctx, "read the topics' metadata from Kafka", func(ctx context.Context) error {
		counts, err := c.partitionCounts(ctx, topics)
		if err != nil {
			return err
		}
		for _, t := range c.cfg.Topics {
			if counts[t] <= 0 {
				return final(fmt.Errorf("consumer: topic %q does not exist on %v: create it, or fix Config.Topics", t, c.cfg.Kafka["bootstrap.servers"]))
			}
		}
		if t := c.cfg.DeadLetterTopic; t != "" && counts[t] <= 0 {
			return final(fmt.Errorf("consumer: dead-letter topic %q does not exist: create it, or fix Config.DeadLetterTopic", t))
		}
		return nil
	})
}

// partitionCounts reads the topics' partition counts from Kafka: one
// Metadata request for these topics (DescribeTopics), not for every topic
// of the cluster. The leader reads them every PartitionRefresh, and a
// cluster with thousands of topics would answer a request for all of them
// with all their partitions each time. A topic that does not exist is left
// out; any other trouble with a topic is an error (explainKafka says
// whether a retry can fix it).
func (c *Consumer) partitionCounts(ctx context.Context, topics []string) (map[string]int32, error) {
	timeout := c.cfg.StartTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	descs, err := c.describeTopics(dctx, topics, kafka.SetAdminRequestTimeout(timeout))
	if err != nil {
		return nil, fmt.Errorf("consumer: read Kafka metadata from %v within %s: %w", c.cfg.Kafka["bootstrap.servers"], timeout.Round(100*time.Millisecond), err)
	}
	out := make(map[string]int32)
	for _, d := range descs {
		if len(d.Partitions) > 0 {
			out[d.Name] = int32(len(d.Partitions))
		}
	}
	return out, nil
}

// describeTopics describes topics in one Metadata request (a name given
// twice is asked once: librdkafka refuses it) and returns the descriptions
// of the topics that exist: partition counts and topic ids both come from
// here. A topic Kafka answers with another error than "unknown topic"
// (LEADER_NOT_AVAILABLE while a broker starts, TOPIC_AUTHORIZATION_FAILED)
// makes it an error, not a missing topic.
func (c *Consumer) describeTopics(ctx context.Context, topics []string, opts ...kafka.DescribeTopicsAdminOption) ([]kafka.TopicDescription, error) {
	a, err := kafka.NewAdminClientFromConsumer(c.kc)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	names := slices.Compact(slices.Sorted(slices.Values(topics)))
	res, err := a.DescribeTopics(ctx, kafka.NewTopicCollectionOfTopicNames(names), opts...)
	if err != nil {
		return nil, explainKafka(err)
	}
	descs := res.TopicDescriptions[:0]
	for _, d := range res.TopicDescriptions {
		switch d.Error.Code() {
		case kafka.ErrNoError:
			descs = append(descs, d)
		case kafka.ErrUnknownTopicOrPart, kafka.ErrUnknownTopic:
		default:
			return nil, fmt.Errorf("topic %q: %w", d.Name, explainKafka(d.Error))
		}
	}
	return descs, nil
}
