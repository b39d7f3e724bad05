package main

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/internal/devcluster"
)

// input is a produced topic and what every row must count from it.
type input struct {
	topic      string
	partitions int32
	records    int
	end        map[int32]int64 // end offset of each partition
	want       map[string]int  // records per key
}

// produce writes the workload into a new topic of p partitions: record i
// has key key-(i mod keys), and librdkafka's partitioner spreads the keys.
func (b *bench) produce(p int32) (*input, error) {
	in := &input{topic: fmt.Sprintf("counts-%dp", p), partitions: p, records: b.records, end: map[int32]int64{}, want: map[string]int{}}
	if err := devcluster.CreateTopics(b.brokers, map[string]int32{in.topic: p}, 1); err != nil {
		return nil, err
	}
	b.logf("producing %d records over %d keys into %s", b.records, b.keys, in.topic)
	pr, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": b.brokers, "linger.ms": 5, "acks": "all", "log_level": 3})
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	acks := make(chan kafka.Event, b.records)
	for i := range b.records {
		k := fmt.Sprintf("key-%d", i%b.keys)
		m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &in.topic, Partition: kafka.PartitionAny}, Key: []byte(k), Value: []byte(k)}
		if err := pr.Produce(m, acks); err != nil {
			return nil, fmt.Errorf("produce into %s: %w", in.topic, err)
		}
		in.want[k]++
	}
	for range b.records {
		m := (<-acks).(*kafka.Message)
		if err := m.TopicPartition.Error; err != nil {
			return nil, fmt.Errorf("produce into %s: %w", in.topic, err)
		}
		pt := m.TopicPartition.Partition
		in.end[pt] = max(in.end[pt], int64(m.TopicPartition.Offset)+1)
	}
	return in, nil
}

// system is what runs a row.
type system string

const (
	streams  system = "Kafka Streams"
	keyshare system = "keyshare + statestore"
)

// setup is one row's configuration: instances, each handling up to
// parallel records at once (Streams: stream threads; keyshare: members'
// Concurrency).
type setup struct {
	system    system
	instances int
	parallel  int
	note      string // how the row differs from the defaults
}

func (s setup) String() string {
	if s.system == streams {
		return fmt.Sprintf("%s, 1 instance × %s%s", s.system, plural(s.parallel, "stream thread"), s.note)
	}
	return fmt.Sprintf("%s, %s × Concurrency %d%s", s.system, plural(s.instances, "member"), s.parallel, s.note)
}

// plural is n and what, with an s when n is not 1.
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// setups are the rows of a topic of p partitions: Streams with a thread
// per partition; keyshare at the same parallelism; keyshare at its default
// Concurrency (16), in one member and split over four.
func (b *bench) setups(p int32) []setup {
	var note string
	if b.guarantee != "exactly_once_v2" {
		note += ", " + b.guarantee
	}
	if b.cacheBytes >= 0 {
		note += fmt.Sprintf(", record cache %d bytes", b.cacheBytes)
	}
	if b.crashAt > 0 {
		note += fmt.Sprintf(", killed at %.0f%% of the counts and started again", 100*b.crashAt)
	}
	var out []setup
	if b.only != "keyshare" {
		out = append(out, setup{streams, 1, int(p), note})
	}
	if b.only != "streams" {
		var ks string
		if len(b.storeKafka) > 0 {
			var kv []string
			for k, v := range b.storeKafka {
				kv = append(kv, k+"="+v)
			}
			sort.Strings(kv)
			ks = ", changelog producer " + strings.Join(kv, " ")
		}
		out = append(out, setup{keyshare, 1, int(p), ks}, setup{keyshare, 1, 16, ks}, setup{keyshare, 4, 4, ks})
	}
	return out
}

// row is one setup's measured run.
type row struct {
	setup
	partitions int32
	records    int           // records of the input
	handled    int64         // handlings of records (duplicates included); -1 when not known
	elapsed    time.Duration // from the first lookup's start to the last record's end
	counts     string        // "exact", or what was wrong
	storeOwn   time.Duration // keyshare: the Store's own time a record, beyond its handler's (restore waits, the append)

	runs            int     // runs summarized in this row
	lowest, highest float64 // the runs' lowest and highest records/s
}

// summarize returns the median run of runs (by records/s) with the range
// of their rates, and counts that are exact only if every run's were.
func summarize(runs []row) row {
	sorted := slices.Clone(runs)
	slices.SortFunc(sorted, func(a, b row) int { return cmp.Compare(a.rate(), b.rate()) })
	med := sorted[len(sorted)/2]
	med.runs, med.lowest, med.highest = len(runs), sorted[0].rate(), sorted[len(sorted)-1].rate()
	var bad []string
	for i, r := range runs {
		if r.counts != "exact" {
			bad = append(bad, fmt.Sprintf("run %d: %s", i+1, r.counts))
		}
	}
	med.counts = "exact"
	if len(bad) > 0 {
		med.counts = strings.Join(bad, "; ")
	}
	return med
}

func (r row) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.records) / r.elapsed.Seconds()
}

// compareCounts returns "" when got holds exactly want's keys with want's
// counts, or else the number of wrong keys with a few examples.
func compareCounts(got map[string]int64, want map[string]int) string {
	var bad []string
	for k, n := range want {
		if got[k] != int64(n) {
			bad = append(bad, fmt.Sprintf("%s: %d, want %d", k, got[k], n))
		}
	}
	for k, n := range got {
		if _, ok := want[k]; !ok {
			bad = append(bad, fmt.Sprintf("%s: %d, want none", k, n))
		}
	}
	if len(bad) == 0 {
		return ""
	}
	sort.Strings(bad)
	ex := bad[:min(3, len(bad))]
	return fmt.Sprintf("%d of %d keys wrong (%s)", len(bad), len(want), strings.Join(ex, "; "))
}

// reached reports whether every key of want has a count of at least its
// records in got: the run has handled everything (or counted some twice).
func reached(got map[string]int64, want map[string]int) bool {
	for k, n := range want {
		if got[k] < int64(n) {
			return false
		}
	}
	return true
}
