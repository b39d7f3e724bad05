package consumer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/keyshare/keyshare/ledger"
)

// The metrics a member exports (docs/operations.md explains each).
var (
	descHandled          = prometheus.NewDesc("keyshare_records_handled_total", "Records handled successfully.", nil, nil)
	descFailed           = prometheus.NewDesc("keyshare_records_failed_total", "Handler attempts that failed (errors and panics).", nil, nil)
	descRetried          = prometheus.NewDesc("keyshare_records_retried_total", "Retries of failed records.", nil, nil)
	descDeadLettered     = prometheus.NewDesc("keyshare_records_dead_lettered_total", "Records written to the dead-letter topic.", nil, nil)
	descDeadLetterSmall  = prometheus.NewDesc("keyshare_dead_letters_reduced_total", "Dead letters written without their value (or key and headers) because the whole record was too large for the dead-letter topic.", nil, nil)
	descDeadLetterErrors = prometheus.NewDesc("keyshare_dead_letter_errors_total", "Dead-letter writes that failed and are tried again (the handler is not called again); a copy too large that is sent smaller is not counted.", nil, nil)
	descFlushes          = prometheus.NewDesc("keyshare_ledger_flushes_total", "Ledger flush transactions written to etcd.", nil, nil)
	descFlushBytes       = prometheus.NewDesc("keyshare_ledger_flush_bytes_total", "Bytes of keys and values written by ledger flushes.", nil, nil)
	descFetched          = prometheus.NewDesc("keyshare_records_fetched_total", "Records fetched from Kafka (including records of other members' ranges, passed over).", nil, nil)
	descShelved          = prometheus.NewDesc("keyshare_records_shelved_total", "Records of a blocked key dropped from memory beyond MaxQueuedPerKey: they stay pending in the ledger and are fetched again when the key moves.", nil, nil)
	descLosses           = prometheus.NewDesc("keyshare_retention_losses_total", "Loss reports written: owned ranges that found records deleted from Kafka before they were handled (see lost/ in etcd).", nil, nil)
	descLoadReports      = prometheus.NewDesc("keyshare_load_reports_total", "Load reports written to etcd (load/<member-id>, one every LoadReportInterval).", nil, nil)
	descLoadReportErrors = prometheus.NewDesc("keyshare_load_report_errors_total", "Load reports etcd did not take (skipped; the next one replaces it).", nil, nil)
	descCommits          = prometheus.NewDesc("keyshare_kafka_commits_total", "Offsets committed to Kafka while leader.", nil, nil)
	descRepairs          = prometheus.NewDesc("keyshare_commit_repairs_total", "Kafka committed offsets the leader found different from the offset recorded in etcd (a deposed leader's late commit, an offset set with Kafka's own tools) and committed etcd's again.", nil, nil)
	descInFlight         = prometheus.NewDesc("keyshare_in_flight", "Records fetched and not finished.", nil, nil)
	descInFlightBytes    = prometheus.NewDesc("keyshare_in_flight_bytes", "Bytes (keys, values, headers) of the records fetched and not finished; bounded by MaxInFlightBytes.", nil, nil)
	descUnflushed        = prometheus.NewDesc("keyshare_unflushed", "Records completed since the last ledger flush that reached etcd (they run again after a crash).", nil, nil)
	descPaused           = prometheus.NewDesc("keyshare_paused", "1 while fetching is paused at the in-flight bound or by an operator.", nil, nil)
	descGroupPaused      = prometheus.NewDesc("keyshare_group_paused", "1 while an operator has paused the group (keyshare group pause).", nil, nil)
	descSession          = prometheus.NewDesc("keyshare_session", "1 while the member has an etcd session.", nil, nil)
	descLeader           = prometheus.NewDesc("keyshare_leader", "1 while the member leads its group.", nil, nil)
	descGeneration       = prometheus.NewDesc("keyshare_generation", "Assignment generation last seen.", nil, nil)
	descStuck            = prometheus.NewDesc("keyshare_stuck_ranges", "Owned ranges held by a stuck record.", nil, nil)
	descHalted           = prometheus.NewDesc("keyshare_retention_halted_partitions", "Partitions halted because Kafka deleted records not yet handled (RetentionLoss \"halt\").", nil, nil)
	descAboveEnd         = prometheus.NewDesc("keyshare_partitions_above_log_end", "Partitions not fetched because the group's position is above the log end (log truncated, or topic recreated).", nil, nil)
	descMember           = prometheus.NewDesc("keyshare_member_info", "Always 1; its member label is the member's id (it changes when the process restarts).", []string{"member"}, nil)

	rangeLabels       = []string{"topic", "partition", "range"}
	descRangePending  = prometheus.NewDesc("keyshare_range_pending", "Pending offsets of an owned range.", rangeLabels, nil)
	descRangeOldest   = prometheus.NewDesc("keyshare_range_oldest_unfinished_seconds", "Age of the oldest unfinished record of an owned range (0 if none).", rangeLabels, nil)
	descRangeWatermrk = prometheus.NewDesc("keyshare_range_watermark", "Watermark of an owned range.", rangeLabels, nil)
	descHotKey        = prometheus.NewDesc("keyshare_hot_key_busy_ratio", "Worker-seconds per second the records of one of an owned range's busiest keys held a worker, from the last load report (at most 4 keys per range; the key label is the key's first 64 bytes, escaped). Near 1 the key alone keeps a worker busy: its order lets no other worker help.", []string{"topic", "partition", "key"}, nil)

	descBacklog     = prometheus.NewDesc("keyshare_group_backlog", "Records between the committed offset and the end of the group's partitions (leader only).", nil, nil)
	descBacklogAge  = prometheus.NewDesc("keyshare_group_backlog_age_seconds", "Time since the oldest uncommitted record of the group's partitions reached the log, as the leader's samples bound it (leader only; 0 without a backlog).", nil, nil)
	descArrivalRate = prometheus.NewDesc("keyshare_group_arrival_records_per_second", "Records appended to the group's partitions per second, over the last minute (leader only).", nil, nil)
	descDrainRate   = prometheus.NewDesc("keyshare_group_drain_records_per_second", "Records the group committed per second, over the last minute (leader only).", nil, nil)

	partLabels     = []string{"topic", "partition"}
	descPartEnd    = prometheus.NewDesc("keyshare_partition_end_offset", "End offset of a partition (leader only).", partLabels, nil)
	descPartSafe   = prometheus.NewDesc("keyshare_partition_safe_watermark", "Safe watermark of a partition (leader only).", partLabels, nil)
	descPartCommit = prometheus.NewDesc("keyshare_partition_committed_offset", "Offset committed to Kafka (leader only).", partLabels, nil)
	descPartLag    = prometheus.NewDesc("keyshare_partition_watermark_lag", "End offset minus safe watermark (leader only).", partLabels, nil)
)

// memberDescs are the collector's metrics, described in full (the
// leader's appear only while it leads).
var memberDescs = []*prometheus.Desc{
	descHandled, descFailed, descRetried, descDeadLettered, descDeadLetterSmall, descDeadLetterErrors,
	descFlushes, descFlushBytes, descFetched, descShelved, descLosses, descLoadReports,
	descLoadReportErrors, descCommits, descRepairs, descInFlight, descInFlightBytes, descUnflushed,
	descPaused, descGroupPaused, descSession, descLeader, descGeneration, descStuck, descHalted,
	descAboveEnd, descMember, descRangePending, descRangeOldest, descRangeWatermrk, descHotKey, descBacklog,
	descBacklogAge, descArrivalRate, descDrainRate, descPartEnd, descPartSafe, descPartCommit,
	descPartLag,
}

// partitionGauges is what the leader last learned about a partition.
type partitionGauges struct {
	end, safe, committed int64
}

// collector exports a member's state at scrape time.
type collector struct {
	c       *Consumer
	backlog *backlogHistory
}

func (m collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range memberDescs {
		ch <- d
	}
}

func (m collector) Collect(ch chan<- prometheus.Metric) {
	c := m.c
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descMember, 1, c.cfg.MemberID)
	counter(descHandled, c.metrics.handled.Load())
	counter(descFailed, c.metrics.failed.Load())
	counter(descRetried, c.metrics.retried.Load())
	counter(descDeadLettered, c.metrics.deadLettered.Load())
	counter(descDeadLetterSmall, c.metrics.deadLetterReduced.Load())
	counter(descDeadLetterErrors, c.metrics.deadLetterErrors.Load())
	counter(descFlushes, c.metrics.flushes.Load())
	counter(descFlushBytes, c.metrics.flushBytes.Load())
	counter(descFetched, c.metrics.fetched.Load())
	counter(descShelved, c.metrics.shelved.Load())
	counter(descCommits, c.metrics.commits.Load())
	counter(descRepairs, c.metrics.commitRepairs.Load())
	counter(descLosses, c.metrics.retentionLosses.Load())
	counter(descLoadReports, c.metrics.loadReports.Load())
	counter(descLoadReportErrors, c.metrics.loadReportErrors.Load())
	st := c.Status()
	gauge(descInFlight, float64(st.InFlight))
	gauge(descInFlightBytes, float64(st.InFlightBytes))
	gauge(descPaused, b2f(st.Paused))
	gauge(descGroupPaused, b2f(st.GroupPaused))
	gauge(descUnflushed, float64(st.Unflushed))
	gauge(descSession, b2f(st.Running))
	gauge(descHalted, float64(len(st.Halted)))
	gauge(descAboveEnd, float64(len(st.AboveLogEnd)))
	gauge(descLeader, b2f(st.Leader))
	gauge(descGeneration, float64(st.Generation))
	stuck := 0
	for _, r := range st.Ranges {
		labels := []string{r.Topic, strconv.Itoa(int(r.Partition)), ledger.HashRange{Lo: r.Lo, Hi: r.Hi}.String()}
		gauge(descRangePending, float64(r.Pending), labels...)
		gauge(descRangeWatermrk, float64(r.Watermark), labels...)
		age := 0.0
		if !r.OldestSince.IsZero() {
			age = time.Since(r.OldestSince).Seconds()
		}
		gauge(descRangeOldest, age, labels...)
		if r.Stuck {
			stuck++
		}
	}
	gauge(descStuck, float64(stuck))
	for s, v := range hotKeySeries(st.Ranges) {
		gauge(descHotKey, v, s.Topic, strconv.Itoa(int(s.Partition)), s.key)
	}
	c.mu.Lock()
	if c.mu.sess == nil || !c.mu.sess.IsLeader() {
		c.mu.partitions = nil // only the leader knows these
	}
	parts := make(map[tp]partitionGauges, len(c.mu.partitions))
	for k, v := range c.mu.partitions {
		parts[k] = v
	}
	c.mu.Unlock()
	f := m.backlog.observe(time.Now(), parts)
	if len(parts) > 0 {
		gauge(descBacklog, float64(f.Records))
		gauge(descBacklogAge, f.AgeSeconds)
		gauge(descArrivalRate, f.ArrivalPerSec)
		gauge(descDrainRate, f.DrainPerSec)
	}
	for t, g := range parts {
		labels := []string{t.Topic, strconv.Itoa(int(t.Partition))}
		gauge(descPartSafe, float64(g.safe), labels...)
		gauge(descPartCommit, float64(g.committed), labels...)
		if g.end >= 0 { // not known yet: no end, and no lag below zero
			gauge(descPartEnd, float64(g.end), labels...)
			gauge(descPartLag, float64(g.end-g.safe), labels...)
		}
	}
}

// hotSeries is the labels of a keyshare_hot_key_busy_ratio series.
type hotSeries struct {
	tp
	key string
}

// hotKeySeries is keyshare_hot_key_busy_ratio at a scrape: the hot keys of
// the ranges the member owns now, so that a key that dropped out of its
// range's busiest, or a range that left, leaves no series behind. One
// series per partition and key text: two long keys can show the same
// text, and a label set given twice would fail the whole scrape; their
// times add up.
func hotKeySeries(ranges []RangeStatus) map[hotSeries]float64 {
	out := map[hotSeries]float64{}
	for _, r := range ranges {
		for _, k := range r.HotKeys {
			out[hotSeries{tp{Topic: r.Topic, Partition: r.Partition}, k.Key}] += k.BusyPerSec
		}
	}
	return out
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// newRegistry builds the member's metric registry. Every metric in it has
// the group label, so that the members of several groups in one process
// can be gathered together.
func (c *Consumer) newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	c.flushSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "keyshare_ledger_flush_seconds", Help: "Latency of ledger flush transactions.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	})
	c.handoffSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "keyshare_handoff_seconds", Help: "Time from when this member saw a range revoked to its release.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
	})
	c.batchRecords = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "keyshare_batch_records", Help: "Records per BatchHandler call (retries of a failed record are calls of one); its count is the calls made.",
		Buckets: prometheus.ExponentialBuckets(1, 4, 7),
	})
	grouped := prometheus.WrapRegistererWith(prometheus.Labels{"group": c.cfg.Group}, reg)
	grouped.MustRegister(collector{c: c, backlog: &backlogHistory{}}, c.flushSeconds, c.handoffSeconds, newBuildInfo())
	if c.cfg.BatchHandler != nil {
		grouped.MustRegister(c.batchRecords)
	}
	return reg
}

// Metrics returns the member's metrics, each labelled with its group, for
// a service that serves them on its own HTTP server (for example with
// promhttp.HandlerFor, or with prometheus.Gatherers to add them to the
// service's own registry and to other members' metrics). They leave out
// the Go runtime's and the process's metrics, which the service's own
// registry usually has; HTTPHandler serves those too.
func (c *Consumer) Metrics() prometheus.Gatherer { return c.registry }

// HTTPHandler serves /metrics (the member's metrics, and the Go runtime's
// and the process's), /healthz (200 while Run is running) and /readyz
// (200 once the member has a session and an assignment, and is not
// retrying a call to Kafka or etcd: the 503 then says which, and why). A
// service that serves it on its own http.Server should set that server's
// timeouts (ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout) and
// MaxHeaderBytes, as Run's metrics server does (5 s, 10 s, 30 s, 30 s,
// 16 KiB).
func (c *Consumer) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(prometheus.Gatherers{c.registry, processMetrics()}, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		c.mu.Lock()
		running := c.mu.running && !c.mu.stopped
		c.mu.Unlock()
		if !running {
			http.Error(w, "not running", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		st := c.Status()
		if p := c.problems.String(); p != "" {
			http.Error(w, p, http.StatusServiceUnavailable)
			return
		}
		if !st.Running || st.Generation == 0 {
			http.Error(w, "no session or no assignment yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "ok: generation %d, %d ranges\n", st.Generation, len(st.Ranges))
	})
	return mux
}

// serverLimits are an HTTP server's timeouts and request header bound.
type serverLimits struct {
	readHeader, read, write, idle time.Duration
	maxHeaderBytes                int
}

// metricsLimits are the metrics server's. Without them (net/http has no
// default for any) every idle keep-alive connection, and every client that
// never finishes its request, held a connection and a goroutine for ever,
// and a request could carry 1 MB of headers. A scrape is a short GET: its
// request needs seconds and a few headers at most; the idle timeout is
// shorter than a common scrape interval, so a scraper reconnects, which
// costs nothing at that rate. Tests shorten them.
var metricsLimits = serverLimits{
	readHeader:     5 * time.Second,
	read:           10 * time.Second,
	write:          30 * time.Second, // a scrape of a member with many ranges, to a slow reader
	idle:           30 * time.Second,
	maxHeaderBytes: 16 << 10,
}

// serveMetrics serves HTTPHandler on cfg.MetricsAddr until ctx ends. It
// serves no secret (counters, gauges, health), over plain HTTP: bind it to
// an address only the scraper reaches (docs/security.md).
func (c *Consumer) serveMetrics(ctx context.Context) (stop func(), err error) {
	ln, err := net.Listen("tcp", c.cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("consumer: metrics address %s: %w (is the port in use? choose another MetricsAddr)", c.cfg.MetricsAddr, err)
	}
	c.mu.Lock()
	c.mu.metricsAddr = ln.Addr().String()
	c.mu.Unlock()
	l := metricsLimits
	srv := &http.Server{Handler: c.HTTPHandler(), ReadHeaderTimeout: l.readHeader, ReadTimeout: l.read,
		WriteTimeout: l.write, IdleTimeout: l.idle, MaxHeaderBytes: l.maxHeaderBytes}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.log.Warn("metrics server", "error", err)
		}
	}()
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}, nil
}

// MetricsAddr is the address the metrics server listens on ("" if none or
// not started yet).
func (c *Consumer) MetricsAddr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.metricsAddr
}
