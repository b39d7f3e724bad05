package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/pgsink"
	"github.com/keyshare/keyshare/testutil"
)

// Exactly-once rows. The members run with --deliver to an endpoint in the
// test process that applies each record through pgsink.Sink.Apply under
// the fence the request carries: the effect (the record's key and SEQ, its
// partition and offset, and the member that wrote it) goes into a table of
// a real PostgreSQL in the same transaction as the sink's dedupe row and
// fence check. A stale fence is answered "fenced" (docs/delivery.md). The
// endpoint also writes each member's record log line for every record it
// answers done, so the matrix's checker runs on these rows as on the
// others. Afterwards the database is checked against the producer's
// acknowledged records: every record's effect exactly once, each key's
// effects in offset order.
//
// The zombie row makes the endpoint hold the requests the zombie has open
// when it is paused (a network or a process that delays them), prunes the
// sink's dedupe rows once the group committed past them (as an operator
// prunes; pgsink.Sink.Prune), and then lets the held writes through under
// their old tokens: the sink must refuse every one. With the fence check
// off (eoUnfenced) the same writes apply those records a second time,
// after their keys' later records, and the checks must say so.

// eoMode says whether a row runs exactly-once, and how.
type eoMode int

const (
	eoOff eoMode = iota
	// eoFenced: the endpoint applies under each request's fence.
	eoFenced
	// eoUnfenced: the endpoint applies every record under one fence that
	// never changes (the whole hash space, token 1), as an endpoint that
	// ignores "fence" would: the sink's check never sees a newer token,
	// its dedupe rows still work.
	eoUnfenced
)

// eoEffects is the table of effects, one row per effect applied, in the
// order applied (id).
const eoEffects = "eo_effects"

// eoEndpoint is the row's delivery endpoint.
type eoEndpoint struct {
	t    *testing.T
	url  string
	dir  string
	mode eoMode
	pool *pgxpool.Pool
	sink *pgsink.Sink
	srv  *http.Server
	// ctx ends when the row does: held writes run under it, not under
	// their requests' (the member closed those long before).
	ctx      context.Context
	cancel   context.CancelFunc
	handlers sync.WaitGroup

	mu struct {
		sync.Mutex
		logs    map[string]*os.File // record logs by member
		holding map[string]bool     // members whose new requests are held
		release chan struct{}       // closed when the held requests may write
		held    []heldRecord
	}
	// Writes of held requests once released: attempted, and accepted
	// (committed) through the sink.
	staleAttempted, staleAccepted atomic.Int64
}

type heldRecord struct {
	partition int32
	offset    int64
}

// eoRequest is what the endpoint reads of a delivery request.
type eoRequest struct {
	Version int    `json:"version"`
	Member  string `json:"member"`
	Records []struct {
		Topic     string `json:"topic"`
		Partition int32  `json:"partition"`
		Offset    int64  `json:"offset"`
		Key       []byte `json:"key"`
		Value     []byte `json:"value"`
		Range     *struct {
			Lo uint64 `json:"lo"`
			Hi uint64 `json:"hi"`
		} `json:"range"`
		Fence *int64 `json:"fence"`
	} `json:"records"`
}

type eoResult struct {
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// eoMemberID is what a request's member must look like: the harness's
// ids, which name files in the row's directory.
var eoMemberID = regexp.MustCompile(`^m[0-9]+$`)

// startEO starts PostgreSQL, the sink's tables and the endpoint on addr
// (host:0). Without PostgreSQL's binaries the row is skipped.
func startEO(t *testing.T, dir, addr string, mode eoMode) *eoEndpoint {
	pg := testutil.StartPostgres(t) // skips, saying why, where PostgreSQL cannot run
	cfg, err := pgxpool.ParseConfig(pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := pgsink.New(pool, pgsink.Config{Prefix: "eo_"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.CreateSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `CREATE TABLE `+eoEffects+` (
	id bigserial PRIMARY KEY, kafka_partition integer NOT NULL, kafka_offset bigint NOT NULL,
	key text NOT NULL, seq integer NOT NULL, writer text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ep := &eoEndpoint{t: t, url: "http://" + ln.Addr().String() + "/records", dir: dir, mode: mode, pool: pool, sink: sink}
	ep.ctx, ep.cancel = context.WithCancel(context.Background())
	ep.mu.logs, ep.mu.holding, ep.mu.release = map[string]*os.File{}, map[string]bool{}, make(chan struct{})
	ep.srv = &http.Server{Handler: ep, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = ep.srv.Serve(ln) }()
	t.Cleanup(ep.close)
	return ep
}

// close stops the endpoint: held requests end without writing.
func (ep *eoEndpoint) close() {
	ep.cancel()
	ep.releaseHeld()
	_ = ep.srv.Close()
	ep.handlers.Wait()
	ep.pool.Close()
	ep.mu.Lock()
	defer ep.mu.Unlock()
	for _, f := range ep.mu.logs {
		_ = f.Close()
	}
}

func (ep *eoEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ep.handlers.Add(1)
	defer ep.handlers.Done()
	start := time.Now()
	var req eoRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "bad request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if req.Version != 1 {
		http.Error(w, "unknown version", http.StatusNotImplemented)
		return
	}
	if !eoMemberID.MatchString(req.Member) {
		http.Error(w, fmt.Sprintf("member %q is not one of the row's", req.Member), http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	held := ep.hold(req.Member, &req)
	if held != nil {
		<-held
		ctx = ep.ctx // as a delayed write would: whatever the member did meanwhile
	}
	results := make([]eoResult, len(req.Records))
	for i, rec := range req.Records {
		if rec.Range == nil || rec.Fence == nil {
			results[i] = eoResult{Status: "failed", Error: "the record has no fence"}
			continue
		}
		f := consumer.Fence{Topic: rec.Topic, Partition: rec.Partition, Lo: rec.Range.Lo, Hi: rec.Range.Hi, Token: *rec.Fence}
		if ep.mode == eoUnfenced {
			f.Lo, f.Hi, f.Token = 0, 1<<32, 1
		}
		key, value := string(rec.Key), string(rec.Value)
		_, s, _ := strings.Cut(value, ":")
		seq, err := strconv.Atoi(s)
		if err != nil {
			results[i] = eoResult{Status: "failed", Error: fmt.Sprintf("value %q is not key-K:SEQ", value)}
			continue
		}
		_, err = ep.sink.Apply(ctx, f, rec.Offset, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+eoEffects+" (kafka_partition, kafka_offset, key, seq, writer) VALUES ($1, $2, $3, $4, $5)",
				rec.Partition, rec.Offset, key, seq, req.Member)
			return err
		})
		if held != nil {
			ep.staleAttempted.Add(1)
			if err == nil {
				ep.staleAccepted.Add(1)
			}
		}
		switch {
		case errors.Is(err, consumer.ErrFenced):
			results[i] = eoResult{Status: "fenced", Error: err.Error()}
			continue
		case err != nil && ctx.Err() != nil:
			return // the member closed the request: it sends the record again, or its next owner does
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable) // the database's trouble: sent again
			return
		}
		if err := ep.writeLog(handledLine{Member: req.Member, Partition: rec.Partition, Offset: rec.Offset,
			Key: key, Value: value, Start: start, Time: time.Now()}); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		results[i] = eoResult{Status: "done"}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"results": results})
}

// writeLog appends l to its member's record log.
func (ep *eoEndpoint) writeLog(l handledLine) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	f := ep.mu.logs[l.Member]
	if f == nil {
		if f, err = os.OpenFile(filepath.Join(ep.dir, l.Member+".jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return err
		}
		ep.mu.logs[l.Member] = f
	}
	_, err = f.Write(append(b, '\n'))
	return err
}

// hold returns the channel a request of member must wait on (nil: it
// goes through), and counts its records as held.
func (ep *eoEndpoint) hold(member string, req *eoRequest) <-chan struct{} {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if !ep.mu.holding[member] {
		return nil
	}
	for _, rec := range req.Records {
		ep.mu.held = append(ep.mu.held, heldRecord{rec.Partition, rec.Offset})
	}
	return ep.mu.release
}

// startHolding holds member's requests from now on; stopHolding lets its
// new ones through again (the held ones wait for releaseHeld).
func (ep *eoEndpoint) startHolding(member string) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	ep.mu.holding[member] = true
}

func (ep *eoEndpoint) stopHolding(member string) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	delete(ep.mu.holding, member)
}

// heldRecords are the records of the requests held so far.
func (ep *eoEndpoint) heldRecords() []heldRecord {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return append([]heldRecord(nil), ep.mu.held...)
}

// releaseHeld lets the held requests write.
func (ep *eoEndpoint) releaseHeld() {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	select {
	case <-ep.mu.release:
	default:
		close(ep.mu.release)
	}
}

// eoZombie is row 5's fault with writes delayed: the endpoint holds the
// requests a non-leader has open, the member is paused 2.5 × TTL (pause,
// as row 5) and its ranges fail over; once the group has committed past
// every held record, the sink's dedupe rows below the commits are pruned
// and the held writes go through under their old tokens.
func eoZombie(e *env, _ bool, _ *rand.Rand) {
	id := nonLeader(e)
	e.eo.startHolding(id)
	deadline := time.Now().Add(10 * time.Second)
	for len(e.eo.heldRecords()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // let a few more of its requests in
	// From here the member sends nothing until it is continued; a request
	// it sends then goes through (and meets the fence if it is stale).
	e.eo.stopHolding(id)
	held := e.eo.heldRecords()
	if len(held) == 0 {
		e.t.Errorf("no request of %s reached the endpoint within 10 s: the zombie has no write to delay", id)
	}
	pause(e, id)
	need := map[int32]int64{}
	for _, h := range held {
		need[h.partition] = max(need[h.partition], h.offset+1)
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		committed := e.lastCommits()
		passed := true
		for p, o := range need {
			passed = passed && committed[p] >= o
		}
		if passed {
			for p := range need {
				n, err := e.eo.sink.Prune(e.t.Context(), topic, p, committed[p])
				if err != nil {
					e.t.Errorf("prune partition %d below %d: %v", p, committed[p], err)
				}
				e.t.Logf("pruned %d dedupe rows of partition %d below the commit %d", n, p, committed[p])
			}
			break
		}
		if time.Now().After(deadline) {
			e.t.Errorf("the group did not commit past the held records %v within 60 s (commits %v)", need, committed)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Logf("releasing %d held records of %s (partitions up to %v)", len(held), id, need)
	e.eo.releaseHeld()
}

// lastCommits is the last observed commit of each partition.
func (e *env) lastCommits() map[int32]int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	last := map[int32]int64{}
	for _, c := range e.commits {
		last[c.partition] = c.offset
	}
	return last
}

// eoCheck is what the database says against the producer's
// acknowledged records.
type eoCheck struct {
	Effects    int // effect rows
	Missing    int // acknowledged records without an effect
	Extra      int // effects beyond the first of a record
	Unexpected int // effects of no acknowledged record
	OutOfOrder int // effects applied after a later offset of their key
	// Held writes of the zombie row, once released: attempted, accepted.
	StaleAttempted, StaleAccepted int64
	Sink                          pgsink.Stats
}

func (c eoCheck) broken() bool {
	return c.Missing > 0 || c.Extra > 0 || c.Unexpected > 0 || c.OutOfOrder > 0
}

func (c eoCheck) String() string {
	return fmt.Sprintf("exactly-once: %d effects, missing %d, extra %d, unexpected %d, out of key order %d; held stale writes %d attempted, %d accepted; sink applied %d, duplicates skipped %d, fenced %d",
		c.Effects, c.Missing, c.Extra, c.Unexpected, c.OutOfOrder, c.StaleAttempted, c.StaleAccepted, c.Sink.Applied, c.Sink.Duplicates, c.Sink.Fenced)
}

// checkEO reads the effects table. Held writes still running are waited
// for first (the endpoint's handlers have all returned when the members
// have stopped, but for held ones).
func (e *env) checkEO() eoCheck {
	ep := e.eo
	ep.releaseHeld()
	done := make(chan struct{})
	go func() { ep.handlers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		e.t.Error("the endpoint's requests did not end within 30 s")
	}
	ctx := e.t.Context()
	type id struct {
		p int32
		o int64
	}
	counts := map[id]int{}
	rows, err := ep.pool.Query(ctx, "SELECT kafka_partition, kafka_offset, count(*) FROM "+eoEffects+" GROUP BY 1, 2")
	if err != nil {
		e.t.Fatal(err)
	}
	c := eoCheck{StaleAttempted: ep.staleAttempted.Load(), StaleAccepted: ep.staleAccepted.Load(), Sink: ep.sink.Stats()}
	for rows.Next() {
		var k id
		var n int
		if err := rows.Scan(&k.p, &k.o, &n); err != nil {
			e.t.Fatal(err)
		}
		counts[k] = n
		c.Effects += n
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	e.mu.Lock()
	acked := map[id]bool{}
	for _, a := range e.acked {
		acked[id{a.partition, a.offset}] = true
		switch n := counts[id{a.partition, a.offset}]; {
		case n == 0:
			c.Missing++
		case n > 1:
			c.Extra += n - 1
		}
	}
	e.mu.Unlock()
	for k, n := range counts {
		if !acked[k] {
			c.Unexpected += n
		}
	}
	// Per key, in the order applied, each offset must be above every
	// offset applied before it.
	if err := ep.pool.QueryRow(ctx, `SELECT count(*) FROM (
	SELECT kafka_offset, max(kafka_offset) OVER (PARTITION BY kafka_partition, key ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
	FROM `+eoEffects+`) x WHERE kafka_offset <= before`).Scan(&c.OutOfOrder); err != nil {
		e.t.Fatal(err)
	}
	return c
}

// eoChecks keeps each row's database check for its row check.
var eoChecks sync.Map // *env → eoCheck

// checkEOZombie: the zombie's held writes were attempted under their old
// tokens, and the sink accepted none; the zombie noticed its session end.
func checkEOZombie(t *testing.T, e *env) {
	checkZombie(t, e)
	v, _ := eoChecks.Load(e)
	c := v.(eoCheck)
	if c.StaleAttempted == 0 {
		t.Error("no held write was attempted: the row tested no stale token")
	}
	if c.StaleAccepted != 0 {
		t.Errorf("the sink accepted %d of %d writes under a stale token", c.StaleAccepted, c.StaleAttempted)
	}
}

// eoRow is base run exactly-once, long form only.
func eoRow(base row) row {
	r := base
	r.name = "EO " + base.name
	r.short = false
	r.eo = eoFenced
	return r
}

// rowNamed is the matrix's row whose name starts with prefix.
func rowNamed(rs []row, prefix string) row {
	for _, r := range rs {
		if strings.HasPrefix(r.name, prefix) {
			return r
		}
	}
	panic("chaos: no row " + prefix)
}

func init() {
	zombie := eoRow(rowNamed(rows, "5 "))
	zombie.fault, zombie.check = eoZombie, checkEOZombie
	zombie.short = true // about 15 s in short form
	rows = append(rows,
		eoRow(rowNamed(rows, "2 ")),
		eoRow(rowNamed(rows, "3 ")),
		eoRow(rowNamed(rows, "4 ")),
		zombie,
		eoRow(rowNamed(loadRows, "17 ")),
		eoRow(rowNamed(partitionRows, "16a ")),
	)
}
