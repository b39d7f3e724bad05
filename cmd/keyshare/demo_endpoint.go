package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/cmd/internal/recordlog"
)

// demoEndpoint is the delivery endpoint (docs/delivery.md) the demo runs
// for its members (keyshare member --deliver). It applies a record by
// spending a uniform draw of up to the demo's --work on it and appending it
// to the sending member's record log (package recordlog), which the demo's
// final check reads. It also keeps its own view: records applied per key,
// and whether each key's records came in their produced order
// ("key-K:SEQ").
type demoEndpoint struct {
	url  string
	dir  string
	work time.Duration // the most spent on one record
	srv  *http.Server

	mu      sync.Mutex
	rng     *rand.Rand
	logs    map[string]*recordlog.Log // by member
	applied int
	again   int             // records applied before: sent again
	late    int             // records applied after a later record of their key: order broken
	seen    map[string]bool // topic/partition/offset applied
	last    map[string]int  // per topic/partition/key, the highest SEQ applied
	perKey  map[string]int  // records applied per key
}

// demoMemberID is what a request's member must look like: the demo's own
// ids, which name files in its directory.
var demoMemberID = regexp.MustCompile(`^m[0-9]+$`)

func startDemoEndpoint(dir string, work time.Duration) (*demoEndpoint, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e := &demoEndpoint{url: "http://" + ln.Addr().String() + "/", dir: dir, work: work, rng: rand.New(rand.NewPCG(7, 11)),
		logs: map[string]*recordlog.Log{}, seen: map[string]bool{}, last: map[string]int{}, perKey: map[string]int{}}
	e.srv = &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = e.srv.Serve(ln) }()
	return e, nil
}

// demoRequest is the part of a delivery request the endpoint reads.
type demoRequest struct {
	Version int    `json:"version"`
	Member  string `json:"member"`
	Records []struct {
		Topic     string `json:"topic"`
		Partition int32  `json:"partition"`
		Offset    int64  `json:"offset"`
		Key       []byte `json:"key"`   // base64 on the wire
		Value     []byte `json:"value"` // base64 on the wire
	} `json:"records"`
}

func (e *demoEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req demoRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "bad request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if req.Version != 1 {
		http.Error(w, "unknown version", http.StatusNotImplemented) // the member waits for an upgrade
		return
	}
	if !demoMemberID.MatchString(req.Member) {
		http.Error(w, fmt.Sprintf("member %q is not one of the demo's", req.Member), http.StatusBadRequest)
		return
	}
	for _, rec := range req.Records {
		e.mu.Lock()
		d := time.Duration(e.rng.Int64N(int64(e.work) + 1))
		e.mu.Unlock()
		if err := sleepCtx(r, d); err != nil {
			return // the member closed the request (a revoked range): it sends the record again
		}
		if err := e.apply(req.Member, rec.Topic, rec.Partition, rec.Offset, rec.Key, rec.Value, start); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable) // the member sends it again
			return
		}
	}
}

func sleepCtx(r *http.Request, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-r.Context().Done():
		return r.Context().Err()
	}
}

// apply writes the record to its member's record log and counts it.
func (e *demoEndpoint) apply(member, topic string, partition int32, offset int64, key, value []byte, start time.Time) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	l := e.logs[member]
	if l == nil {
		var err error
		if l, err = recordlog.Open("the demo's record log", filepath.Join(e.dir, member+".jsonl")); err != nil {
			return err
		}
		e.logs[member] = l
	}
	if err := l.Write(member, &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: partition, Offset: kafka.Offset(offset)},
		Key: key, Value: value}, start); err != nil {
		return err
	}
	e.applied++
	e.perKey[string(key)]++
	_, s, _ := strings.Cut(string(value), ":")
	seq, _ := strconv.Atoi(s)
	id, k := fmt.Sprintf("%s/%d/%d", topic, partition, offset), fmt.Sprintf("%s/%d/%s", topic, partition, key)
	switch last, ok := e.last[k]; {
	case e.seen[id]:
		e.again++
	case ok && seq < last:
		e.late++
	default:
		e.last[k] = seq
	}
	e.seen[id] = true
	return nil
}

// summary is one line about what the endpoint applied.
func (e *demoEndpoint) summary() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return fmt.Sprintf("endpoint applied %d records of %d keys (%d sent again, %d out of key order)", e.applied, len(e.perKey), e.again, e.late)
}

func (e *demoEndpoint) close() {
	_ = e.srv.Close()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range e.logs {
		_ = l.Close()
	}
}
