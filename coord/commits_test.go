package coord_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/coord/internal/fakeoffsets"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// commitRig is one member leading a group of n partitions of topic "t",
// with the ledger written by hand and Kafka in memory. Its commit rounds
// run every 50 ms from the start, on Kafka behind a gate that run opens:
// until then they reach nothing, so a test sets its scene first.
type commitRig struct {
	t      *testing.T
	cli    *clientv3.Client
	schema schema.Keys
	k      *fakeoffsets.Offsets
	gate   *gatedOffsets
	rounds chan coord.CommitRound
	n      int32
}

// newCommitRig starts the rig; log receives the member's logs (nil: the
// test's).
func newCommitRig(t *testing.T, n int32, maxTxnOps int, log hclog.Logger) *commitRig {
	cli, e := testutil.StartEtcd(t)
	counts := map[string]int32{"t": n}
	r := &commitRig{t: t, cli: cli, schema: schema.Group{Prefix: "/keyshare", Name: "g"}.Keys(), k: fakeoffsets.New(), rounds: make(chan coord.CommitRound, 1000), n: n}
	r.gate = &gatedOffsets{Offsets: r.k, open: make(chan struct{})}
	cfg := testConfig(t, "a", counts)
	cfg.MaxTxnOps = maxTxnOps
	if log != nil {
		cfg.Logger = log
	}
	cfg.Offsets, cfg.CommitInterval = r.gate, 50*time.Millisecond
	cfg.OnCommitRound = func(cr coord.CommitRound) {
		if !r.gate.opened() {
			return
		}
		select {
		case r.rounds <- cr:
		default:
		}
	}
	join(t, e.Endpoints, cfg)
	waitFor(t, "every partition assigned", 60*time.Second, func() bool {
		snap := snapshot(t, cli)
		return len(snap.Ranges) == int(n) && settled(snap)
	})
	return r
}

// gatedOffsets is Offsets that reads nothing and commits nothing until
// open is closed: a round that learns no committed offset does nothing.
type gatedOffsets struct {
	coord.Offsets
	open chan struct{}
}

func (g *gatedOffsets) opened() bool {
	select {
	case <-g.open:
		return true
	default:
		return false
	}
}

func (g *gatedOffsets) Committed(ctx context.Context, parts []assign.TopicPartition) (map[assign.TopicPartition]coord.KafkaOffset, error) {
	if !g.opened() {
		return nil, nil
	}
	return g.Offsets.Committed(ctx, parts)
}

func (g *gatedOffsets) Commit(ctx context.Context, offsets map[assign.TopicPartition]int64) (map[assign.TopicPartition]error, error) {
	if !g.opened() {
		return nil, errors.New("commit before the test opened the gate")
	}
	return g.Offsets.Commit(ctx, offsets)
}

func (g *gatedOffsets) Ends(ctx context.Context, parts []assign.TopicPartition) (map[assign.TopicPartition]int64, error) {
	if !g.opened() {
		return nil, nil
	}
	return g.Offsets.Ends(ctx, parts)
}

func tpOf(p int32) assign.TopicPartition { return assign.TopicPartition{Topic: "t", Partition: p} }

// setMarks writes each partition's ledger entry so that its watermark is
// next(p), and sets its end offset there.
func (r *commitRig) setMarks(next func(p int32) int64) {
	r.t.Helper()
	snap := snapshot(r.t, r.cli)
	var ops []clientv3.Op
	flush := func() {
		if _, err := r.cli.Txn(r.t.Context()).Then(ops...).Commit(); err != nil {
			r.t.Fatal(err)
		}
		ops = ops[:0]
	}
	for _, rs := range snap.Ranges {
		n := next(rs.Record.Partition)
		e := ledger.Entry{Segments: []ledger.Segment{{Lo: rs.Record.Lo, Hi: rs.Record.Hi, Next: n}}}
		ops = append(ops, clientv3.OpPut(rs.LedgerKey, string(ledger.Encode(e))))
		r.k.SetEnd(tpOf(rs.Record.Partition), n)
		if len(ops) == 100 {
			flush()
		}
	}
	if len(ops) > 0 {
		flush()
	}
}

// revision is etcd's current revision: a reset's epoch is the revision of
// the snapshot it was planned on, never above the revision that stores it.
func (r *commitRig) revision() int64 {
	r.t.Helper()
	resp, err := r.cli.Get(r.t.Context(), "x", clientv3.WithCountOnly())
	if err != nil {
		r.t.Fatal(err)
	}
	return resp.Header.Revision
}

// run lets the commit rounds reach Kafka; rounds come out on the
// channel from then on.
func (r *commitRig) run() <-chan coord.CommitRound {
	close(r.gate.open)
	return r.rounds
}

// until waits for a round that satisfies ok, and returns it.
func until(t *testing.T, what string, rounds <-chan coord.CommitRound, ok func(coord.CommitRound) bool) coord.CommitRound {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case cr := <-rounds:
			if ok(cr) {
				return cr
			}
		case <-deadline:
			t.Fatalf("no commit round with %s", what)
		}
	}
}

func allAt(cr coord.CommitRound, n int32, off int64) bool {
	if len(cr.Partitions) != int(n) {
		return false
	}
	for _, p := range cr.Partitions {
		if p.Committed != off || p.End != off {
			return false
		}
	}
	return true
}

// TestCommitRoundsBatched: with 300 partitions and MaxTxnOps 32, a round
// records the partitions that moved in ⌈n ÷ 31⌉ transactions and commits
// them to Kafka in one call; a later round records and commits only the
// partitions that moved again.
func TestCommitRoundsBatched(t *testing.T) {
	r := newCommitRig(t, 300, 32, nil)
	r.setMarks(func(int32) int64 { return 10 })
	rounds := r.run()
	// The leader's cache may not hold all of setMarks' writes when the
	// first round runs: that round writes what it sees and the next the
	// rest. Each round's records go in ⌈n ÷ 31⌉ transactions (MaxTxnOps 32,
	// less the leadership guard).
	wantTxns, recorded, moved := 0, 0, 0
	until(t, "all 300 committed at 10", rounds, func(cr coord.CommitRound) bool {
		wantTxns += (cr.Recorded + 30) / 31
		recorded += cr.Recorded
		if cr.Recorded > 0 {
			moved++
		}
		return allAt(cr, 300, 10)
	})

	resp, err := r.cli.Get(t.Context(), r.schema.Commits(), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	revs := make(map[int64]int)
	for _, kv := range resp.Kvs {
		revs[kv.ModRevision]++
	}
	if len(resp.Kvs) != 300 || recorded != 300 || len(revs) != wantTxns {
		t.Fatalf("%d commit records (rounds say %d) in %d transactions, want 300 in %d", len(resp.Kvs), recorded, len(revs), wantTxns)
	}
	for rev, n := range revs {
		if n > 31 {
			t.Fatalf("%d commit records in the transaction at revision %d, more than MaxTxnOps−1 = 31", n, rev)
		}
	}
	// Kafka hears one commit call per round that moved partitions, each
	// partition in exactly one of them.
	calls := r.k.Calls()
	first := make(map[assign.TopicPartition]int)
	for _, c := range calls.History {
		for tp := range c {
			first[tp]++
		}
	}
	if len(calls.History) != moved || len(first) != 300 {
		t.Fatalf("%d Kafka commit calls over %d partitions, want %d (one per round that moved) over 300", len(calls.History), len(first), moved)
	}
	for tp, n := range first {
		if n != 1 {
			t.Fatalf("partition %d committed %d times on its way to 10, want once", tp.Partition, n)
		}
	}
	settled := len(calls.History)

	r.setMarks(func(p int32) int64 { return 10 + int64(p%2)*10 })
	until(t, "the odd partitions committed at 20", rounds, func(cr coord.CommitRound) bool {
		return cr.Partitions[tpOf(1)].Committed == 20 && cr.Partitions[tpOf(299)].Committed == 20
	})
	// setMarks writes in several transactions, so a round may see part
	// of them: the later commits hold the 150 odd partitions, each once.
	calls = r.k.Calls()
	again := make(map[assign.TopicPartition]int)
	for _, c := range calls.History[settled:] {
		for tp := range c {
			again[tp]++
		}
	}
	for tp, n := range again {
		if tp.Partition%2 == 0 || n != 1 {
			t.Fatalf("partition %d committed %d times after it did not move", tp.Partition, n)
		}
	}
	if len(again) != 150 {
		t.Fatalf("%d partitions committed again, want the 150 that moved", len(again))
	}
	// Every round asks Kafka once per kind of call, whatever the count.
	if calls.Committed != calls.Ends {
		t.Fatalf("Committed called %d times, Ends %d: want once each per round", calls.Committed, calls.Ends)
	}
}

// TestCommitRepairAndFloor: a late commit below etcd's offset (a deposed
// leader's) is repaired; a partition Kafka holds ahead of the ledger (a
// group moving from a plain consumer group) is never moved back.
func TestCommitRepairAndFloor(t *testing.T) {
	r := newCommitRig(t, 4, 128, nil)
	r.k.SetCommitted(tpOf(3), 50) // the plain group's offset
	r.setMarks(func(int32) int64 { return 10 })
	rounds := r.run()
	until(t, "0–2 committed at 10", rounds, func(cr coord.CommitRound) bool {
		return cr.Partitions[tpOf(0)].Committed == 10 && cr.Partitions[tpOf(2)].Committed == 10
	})
	r.k.SetCommitted(tpOf(1), 4) // the zombie's late commit
	cr := until(t, "the repair", rounds, func(cr coord.CommitRound) bool { return cr.Repairs > 0 })
	if cr.Repairs != 1 || r.k.CommittedOf(tpOf(1)) != 10 {
		t.Fatalf("repairs %d, partition 1 at %d; want 1 and 10", cr.Repairs, r.k.CommittedOf(tpOf(1)))
	}
	if got := r.k.CommittedOf(tpOf(3)); got != 50 {
		t.Fatalf("partition 3 at %d, want Kafka's 50 kept", got)
	}
	r.setMarks(func(int32) int64 { return 60 })
	until(t, "all at 60", rounds, func(cr coord.CommitRound) bool { return allAt(cr, 4, 60) })
}

// TestCommitAfterTopicReset: once a topic reset deletes the commit records
// and Kafka's committed offsets are set back, the rounds commit the new
// log's watermarks; the leader's memory of its own earlier writes does not
// hold them at the old topic's offsets.
func TestCommitAfterTopicReset(t *testing.T) {
	r := newCommitRig(t, 2, 128, nil)
	r.setMarks(func(int32) int64 { return 50 })
	rounds := r.run()
	until(t, "both committed at 50", rounds, func(cr coord.CommitRound) bool { return allAt(cr, 2, 50) })

	// What the reset does: the ranges' ledger starts again at the new
	// log's start (written first here: the reset deletes it with the
	// commit records), the commit records go, and Kafka is set to the new
	// log's start.
	r.setMarks(func(int32) int64 { return 5 })
	if _, err := r.cli.Delete(t.Context(), r.schema.Commits(), clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	for p := range r.n {
		r.k.SetCommittedBy(tpOf(p), 0, "recreated-topic-reset")
	}
	until(t, "both committed at 5", rounds, func(cr coord.CommitRound) bool { return allAt(cr, 2, 5) })
	// Later rounds must not put the old offset back.
	until(t, "one more round", rounds, func(coord.CommitRound) bool { return true })
	cr := until(t, "a second round", rounds, func(coord.CommitRound) bool { return true })
	if !allAt(cr, 2, 5) {
		t.Fatalf("after the reset: %+v, want both committed at 5", cr.Partitions)
	}
}

// TestCommitOperatorReset: an operator's reset lowers etcd's commit record
// (with its reset epoch) and Kafka's offset, but a commit round that read
// its cache before the reset puts the older offset back in Kafka. The
// leader commits the reset's offset again, once, though it is below what
// Kafka holds; later rounds go on from there.
func TestCommitOperatorReset(t *testing.T) {
	r := newCommitRig(t, 2, 128, nil)
	r.setMarks(func(int32) int64 { return 50 })
	rounds := r.run()
	until(t, "both committed at 50", rounds, func(cr coord.CommitRound) bool { return allAt(cr, 2, 50) })

	r.setMarks(func(int32) int64 { return 5 })
	epoch := r.revision() // the snapshot the reset was planned on
	for p := range r.n {
		rec := fmt.Sprintf(`{"v":1,"offset":5,"leader":"reset-offsets","at":"2026-01-01T00:00:00Z","reset":%d}`, epoch)
		if _, err := r.cli.Put(t.Context(), r.schema.Commit("t", p), rec); err != nil {
			t.Fatal(err)
		}
		r.k.SetCommittedBy(tpOf(p), 50, fakeoffsets.Leader) // the racing round's late commit
	}
	until(t, "both committed at the reset's 5", rounds, func(cr coord.CommitRound) bool { return allAt(cr, 2, 5) })
	r.setMarks(func(int32) int64 { return 8 })
	until(t, "both committed at 8", rounds, func(cr coord.CommitRound) bool { return allAt(cr, 2, 8) })
}

// TestCommitLateCommitAfterReset: once the leader has committed an
// operator's reset (5, below the 50 it had committed), a commit of the old
// offset that lands late (a deposed leader's, or a round that raced the
// reset) puts 50 back in Kafka. etcd has recorded a commit for the
// partition, so Kafka above it is no floor: the leader commits 5 again.
func TestCommitLateCommitAfterReset(t *testing.T) {
	r := newCommitRig(t, 1, 128, nil)
	r.setMarks(func(int32) int64 { return 50 })
	rounds := r.run()
	until(t, "committed at 50", rounds, func(cr coord.CommitRound) bool { return allAt(cr, 1, 50) })

	// The reset as keyshare group reset-offsets writes it: the record
	// with its epoch, the ledger, Kafka.
	r.setMarks(func(int32) int64 { return 5 })
	rec := fmt.Sprintf(`{"v":1,"offset":5,"leader":"keyshare group reset-offsets","at":"2026-01-01T00:00:00Z","reset":%d}`, r.revision())
	if _, err := r.cli.Put(t.Context(), r.schema.Commit("t", 0), rec); err != nil {
		t.Fatal(err)
	}
	r.k.SetCommittedBy(tpOf(0), 5, "keyshare group reset-offsets")
	until(t, "committed at the reset's 5", rounds, func(cr coord.CommitRound) bool { return allAt(cr, 1, 5) })
	afterRounds(rounds, 3)

	r.k.SetCommittedBy(tpOf(0), 50, "old-leader") // the late commit
	afterRounds(rounds, 10)
	if got := r.k.CommittedOf(tpOf(0)); got != 5 {
		t.Fatalf("Kafka holds %d ten rounds after the late commit, want etcd's 5 again", got)
	}
}

// TestCommitEtcdBehindKafka: etcd restored from an older backup holds a
// commit record below the offset keyshare committed to Kafka since, with
// no reset to explain it. etcd's record wins, as for every repair (the
// records between run again), and the warning says that etcd's state is
// older than Kafka's rather than blaming a reset.
func TestCommitEtcdBehindKafka(t *testing.T) {
	logs := &testutil.Buffer{}
	r := newCommitRig(t, 1, 128, hclog.New(&hclog.LoggerOptions{Output: io.MultiWriter(logs, testLogWriter{t}), Level: hclog.Info}))
	r.setMarks(func(int32) int64 { return 50 })
	rounds := r.run()
	until(t, "committed at 50", rounds, func(cr coord.CommitRound) bool { return allAt(cr, 1, 50) })

	// What the backup held: the ledger and the commit record at 20.
	r.setMarks(func(int32) int64 { return 20 })
	if _, err := r.cli.Put(t.Context(), r.schema.Commit("t", 0), `{"v":1,"offset":20,"leader":"a","at":"2026-01-01T00:00:00Z"}`); err != nil {
		t.Fatal(err)
	}
	until(t, "Kafka back at etcd's 20", rounds, func(cr coord.CommitRound) bool { return allAt(cr, 1, 20) })
	line := logLine(logs.String(), "partition=0 ", "kafka_had=50")
	for _, want := range []string{"etcd's state is older than Kafka's", "etcd=20", "restored from a backup"} {
		if !strings.Contains(line, want) {
			t.Errorf("warning %q lacks %q", line, want)
		}
	}
	if strings.Contains(line, "before an offset reset") {
		t.Errorf("warning %q blames a reset the partition never had", line)
	}
}

// TestCommitOffsetSetOutsideKeyshare: an operator moves the group's offsets
// with Kafka's own tool (kafka-consumer-groups --reset-offsets, which Kafka
// accepts: the group has no Kafka members), one above etcd's record and
// one below. keyshare's record wins both, and the warning says what Kafka
// held, what etcd holds, and which command resets a keyshare group.
func TestCommitOffsetSetOutsideKeyshare(t *testing.T) {
	logs := &testutil.Buffer{}
	r := newCommitRig(t, 2, 128, hclog.New(&hclog.LoggerOptions{Output: io.MultiWriter(logs, testLogWriter{t}), Level: hclog.Info}))
	r.setMarks(func(int32) int64 { return 10 })
	rounds := r.run()
	until(t, "both committed at 10", rounds, func(cr coord.CommitRound) bool { return allAt(cr, 2, 10) })

	r.k.SetCommitted(tpOf(0), 80)
	r.k.SetCommitted(tpOf(1), 2)
	afterRounds(rounds, 10)
	for p := range r.n {
		if got := r.k.CommittedOf(tpOf(p)); got != 10 {
			t.Errorf("partition %d: Kafka holds %d ten rounds after the outside reset, want etcd's 10", p, got)
		}
	}
	for p, had := range map[int32]int64{0: 80, 1: 2} {
		line := logLine(logs.String(), fmt.Sprintf("partition=%d ", p), "kafka_had=")
		for _, want := range []string{fmt.Sprintf("kafka_had=%d", had), "etcd=10", "kafka-consumer-groups", "keyshare group reset-offsets"} {
			if !strings.Contains(line, want) {
				t.Errorf("partition %d: warning %q lacks %q", p, line, want)
			}
		}
	}
}

// logLine is the first line of logs that contains all of parts.
func logLine(logs string, parts ...string) string {
	for _, l := range strings.Split(logs, "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			return l
		}
	}
	return ""
}

// afterRounds waits for n more commit rounds.
func afterRounds(rounds <-chan coord.CommitRound, n int) {
	for range n {
		<-rounds
	}
}

// TestCommitSlowBroker: a Kafka commit that does not return does not hold
// the rounds: each is cut at its budget and the next one runs.
func TestCommitSlowBroker(t *testing.T) {
	r := newCommitRig(t, 2, 128, nil)
	r.k.SetCommitDelay(time.Hour)
	r.setMarks(func(int32) int64 { return 10 })
	rounds := r.run()
	for i := range 3 {
		cr := until(t, fmt.Sprintf("round %d failing its commit", i), rounds, func(cr coord.CommitRound) bool { return cr.Failed > 0 })
		if cr.Took > time.Minute {
			t.Fatalf("round took %s", cr.Took)
		}
	}
	r.k.SetCommitDelay(0)
	until(t, "both committed", rounds, func(cr coord.CommitRound) bool { return allAt(cr, 2, 10) })
}

// TestCommitRecordAboveLogEnd: a commit record that decodes cleanly but
// holds an offset past the partition's log end (written raw, as etcdctl
// would) is damaged: no member can have handled a record that does not
// exist. The leader never commits it to Kafka; it says so once and writes
// the record again from the ledger's safe watermark.
func TestCommitRecordAboveLogEnd(t *testing.T) {
	logs := &testutil.Buffer{}
	r := newCommitRig(t, 1, 128, hclog.New(&hclog.LoggerOptions{Output: io.MultiWriter(logs, testLogWriter{t}), Level: hclog.Info}))
	r.setMarks(func(int32) int64 { return 300 })
	rounds := r.run()
	until(t, "committed at 300", rounds, func(cr coord.CommitRound) bool { return allAt(cr, 1, 300) })

	const absurd = 1_000_000_000_000_000
	rec := fmt.Sprintf(`{"v":1,"offset":%d,"leader":"m1","at":"2026-01-01T00:00:00Z"}`, int64(absurd))
	if _, err := r.cli.Put(t.Context(), r.schema.Commit("t", 0), rec); err != nil {
		t.Fatal(err)
	}
	afterRounds(rounds, 10)
	if got := r.k.CommittedOf(tpOf(0)); got != 300 {
		t.Fatalf("Kafka holds %d ten rounds after a commit record of %d was planted, want the safe watermark 300", got, int64(absurd))
	}
	for _, commit := range r.k.Calls().History {
		if c, ok := commit[tpOf(0)]; ok && c > 300 {
			t.Fatalf("the leader committed %d to Kafka, past the log end 300", c)
		}
	}
	resp, err := r.cli.Get(t.Context(), r.schema.Commit("t", 0))
	if err != nil || len(resp.Kvs) != 1 || !strings.Contains(string(resp.Kvs[0].Value), `"offset":300`) {
		t.Fatalf("commit record not repaired from the ledger: %v %v", resp, err)
	}
	if n := strings.Count(logs.String(), "above the partition's log end"); n != 1 {
		t.Errorf("the damaged record is named in %d log lines, want one", n)
	}

	// A record far below the ledger (below the log start, say) is never
	// committed either: a record only moves forward, so the next round
	// writes the ledger's watermark over it and commits that.
	commits := len(r.k.Calls().History)
	if _, err := r.cli.Put(t.Context(), r.schema.Commit("t", 0), `{"v":1,"offset":0,"leader":"m1","at":"2026-01-01T00:00:00Z"}`); err != nil {
		t.Fatal(err)
	}
	afterRounds(rounds, 10)
	for _, commit := range r.k.Calls().History[commits:] {
		if c, ok := commit[tpOf(0)]; ok && c != 300 {
			t.Fatalf("the leader committed %d to Kafka after a commit record of 0 was planted, want only the watermark 300", c)
		}
	}
	if got := r.k.CommittedOf(tpOf(0)); got != 300 {
		t.Fatalf("Kafka holds %d after a commit record of 0 was planted, want 300", got)
	}
}
