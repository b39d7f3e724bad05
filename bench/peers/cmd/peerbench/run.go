package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/bench/peers/checker"
)

// outcome is one run of one peer.
type outcome struct {
	checker.Result
	others    time.Duration // hot-key workload: the records of keys other than key-0
	tail      time.Duration // streamed workload: from the end of production to the last record handled
	committed string        // "yes", or what was short
	timedOut  bool
}

// event is an action during a run, at a fraction of the production time of a
// streamed workload.
type event struct {
	at  float64
	act string // kill (the busiest live instance) or spawn (the remaining instances)
}

// stallTimeout ends a run in which no record was handled for this long;
// above share groups' 30 s acquisition lock, which holds a killed consumer's
// records that long.
const stallTimeout = 60 * time.Second

// streamWarmup is how long instances get to start before a stream begins.
const streamWarmup = 10 * time.Second

// stream is a workload produced while the peer runs: rate records/s for dur.
type stream struct {
	rate int
	dur  time.Duration
}

// runPeer runs one peer on the workload and checks its record log.
// initial is how many instances start (the rest start at a spawn event).
func (b *bench) runPeer(w *workload, p peer, initial int, events []event, st *stream) (outcome, error) {
	r, err := b.newPeerRun(w, p, initial)
	if err != nil {
		return outcome{}, err
	}
	defer r.stopAll(time.Second)
	if err := r.start(0, initial); err != nil {
		return outcome{}, err
	}
	var out outcome
	prodEnd, gaveUp, err := r.watch(events, st)
	if err != nil {
		return out, err
	}
	out.timedOut = gaveUp
	committed := r.settle()
	evs, err := checker.ReadLogs(r.logs()...)
	if err != nil {
		return out, err
	}
	out.Result = checker.Check(evs, w.end)
	out.tail = tailAfter(evs, prodEnd)
	if w.blockAt != "" {
		out.others = othersElapsed(evs, w.end)
	}
	if out.committed = committed(r.group, w); out.committed == "" {
		out.committed = "yes"
	}
	if p.kind == "share" {
		out.committed = r.shareAcknowledged(evs, out.committed)
	}
	return out, nil
}

// committedShort reads the group's committed offsets: "" when every
// partition's equals its end, else what is short.
func (b *bench) committedShort(group string, w *workload) string {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": b.brokers, "group.id": group, "log_level": 0})
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	var tps []kafka.TopicPartition
	for pt := range w.partitions {
		tps = append(tps, kafka.TopicPartition{Topic: &w.topic, Partition: pt})
	}
	got, err := c.Committed(tps, 10000)
	if err != nil {
		return "no: " + err.Error()
	}
	return short(w, func(pt int32) int64 {
		for _, tp := range got {
			if tp.Partition == pt {
				return int64(tp.Offset)
			}
		}
		return -1
	})
}

func short(w *workload, at func(int32) int64) string {
	var miss []string
	for pt := range w.partitions {
		if o := at(pt); o != w.end[pt] {
			if o < 0 {
				miss = append(miss, fmt.Sprintf("p%d none", pt))
			} else {
				miss = append(miss, fmt.Sprintf("p%d %d short", pt, w.end[pt]-o))
			}
		}
	}
	if len(miss) == 0 {
		return ""
	}
	return "no (" + strings.Join(miss, ", ") + ")"
}

// shareShort reads the share group's start offsets through the Java driver.
func (b *bench) shareShort(group string, w *workload) string {
	cp := filepath.Join(b.peersDir, "share/target/peers-share.jar") + ":" + filepath.Join(b.peersDir, "share/target/lib/*")
	out, err := exec.Command("java", "-cp", cp, "keyshare.peers.share.ShareDriver", "offsets", "--brokers", b.brokers,
		"--topic", w.topic, "--group", group, "--partitions", strconv.Itoa(int(w.partitions))).Output()
	if err != nil {
		return "no: " + err.Error()
	}
	// SPSO and lag per partition. The broker reports lag 0 once every
	// record is acknowledged; the SPSO itself can trail the end by the last
	// batch (seen here: 50 of 4,000), so the check is on lag.
	var miss, spsos []string
	seen := 0
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(l, "\t")
		if len(f) < 3 {
			continue
		}
		seen++
		pt, _ := strconv.Atoi(f[0])
		o, _ := strconv.ParseInt(f[1], 10, 64)
		spsos = append(spsos, fmt.Sprintf("p%d end−%d", pt, w.end[int32(pt)]-o))
		if f[2] != "0" {
			miss = append(miss, fmt.Sprintf("p%d lag %q", pt, f[2]))
		}
	}
	if seen < int(w.partitions) {
		miss = append(miss, fmt.Sprintf("%d of %d partitions reported", seen, w.partitions))
	}
	if len(miss) > 0 {
		return "no (" + strings.Join(miss, ", ") + ")"
	}
	b.spso = strings.Join(spsos, ", ")
	return ""
}
