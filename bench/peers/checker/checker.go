// Package checker reads the record logs the peer-benchmark drivers write
// (bench/peers: Java for Parallel Consumer and share groups, Go for a plain
// consumer group and keyshare) and measures every peer the same way: time,
// per-key order, duplicates and lost records.
//
//	evs, err := checker.ReadLogs(paths...)
//	r := checker.Check(evs, map[int32]int64{0: 10000}) // end offset per partition
//	fmt.Println(r.Elapsed, r.OrderViolations, r.Duplicates, r.Lost)
//
// A log line is tab-separated: topic, partition, offset, key, attempt, start
// and end of the handling (Unix microseconds), instance. A driver writes it
// after the record's work and before it acknowledges or marks the record done.
package checker

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Event is one handling of one record.
type Event struct {
	Topic      string
	Partition  int32
	Offset     int64
	Key        string
	Attempt    int
	Start, End int64 // Unix microseconds
	Instance   string
}

// ParseLine reads one record-log line.
func ParseLine(line string) (Event, error) {
	f := strings.Split(line, "\t")
	if len(f) != 8 {
		return Event{}, fmt.Errorf("checker: %d fields, want 8: %q", len(f), line)
	}
	var e Event
	var err error
	ints := make([]int64, 0, 5)
	for _, i := range []int{1, 2, 4, 5, 6} {
		v, perr := strconv.ParseInt(f[i], 10, 64)
		if perr != nil {
			err = perr
		}
		ints = append(ints, v)
	}
	if err != nil {
		return Event{}, fmt.Errorf("checker: %q: %w", line, err)
	}
	e.Topic, e.Key, e.Instance = f[0], f[3], f[7]
	e.Partition, e.Offset, e.Attempt, e.Start, e.End = int32(ints[0]), ints[1], int(ints[2]), ints[3], ints[4]
	return e, nil
}

// ReadLogs reads record logs. A last line cut short (a process killed while
// writing) is skipped: its record counts as not handled.
func ReadLogs(paths ...string) ([]Event, error) {
	var evs []Event
	for _, p := range paths {
		f, err := os.Open(p)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			e, err := ParseLine(sc.Text())
			if err != nil {
				continue
			}
			evs = append(evs, e)
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return evs, nil
}

// Result is what one run of one peer did.
type Result struct {
	Records   int // records in the topic (the end offsets)
	Handled   int // distinct records handled at least once
	Events    int // handlings, counting repeats
	Lost      int // records never handled
	Duplicate int // handlings beyond the first of a record (Events − Handled)
	// OrderViolations counts records whose first handling started before
	// the previous record of the same key in the same partition had
	// finished its first handling (handled before, or while, its
	// predecessor ran).
	OrderViolations int
	// Overlaps counts handlings that started while another handling of
	// the same key in the same partition was still running, repeats
	// included.
	Overlaps int
	// Elapsed is from the first handling's start to the last one's end.
	Elapsed time.Duration
	// Steady is the rate between the times 10% and 90% of the records had
	// ended their first handling (records/s): throughput without the
	// joining at the start and the stragglers at the end.
	Steady float64
}

type pk struct {
	p int32
	k string
}

type po struct {
	p int32
	o int64
}

// Check measures evs against the end offset of each partition (the topic
// holds offsets 0 to end−1, none compacted or aborted).
func Check(evs []Event, end map[int32]int64) Result {
	var r Result
	for _, e := range end {
		r.Records += int(e)
	}
	first := map[po]Event{}
	byKey := map[pk][]Event{}
	var lo, hi int64
	for i, e := range evs {
		if i == 0 || e.Start < lo {
			lo = e.Start
		}
		if i == 0 || e.End > hi {
			hi = e.End
		}
		k := po{e.Partition, e.Offset}
		if f, ok := first[k]; !ok || e.Start < f.Start {
			first[k] = e
		}
		byKey[pk{e.Partition, e.Key}] = append(byKey[pk{e.Partition, e.Key}], e)
	}
	r.Events, r.Handled = len(evs), 0
	for k := range first {
		if k.o >= 0 && k.o < end[k.p] {
			r.Handled++
		}
	}
	r.Lost = r.Records - r.Handled
	r.Duplicate = r.Events - len(first)
	if len(evs) > 0 {
		r.Elapsed = time.Duration(hi-lo) * time.Microsecond
	}
	if r.Records >= 10 && r.Handled >= r.Records*9/10 {
		var ends []int64
		for _, e := range first {
			ends = append(ends, e.End)
		}
		sort.Slice(ends, func(i, j int) bool { return ends[i] < ends[j] })
		i10, i90 := r.Records/10, r.Records*9/10-1
		if d := ends[i90] - ends[i10]; d > 0 {
			r.Steady = float64(i90-i10) / (float64(d) / 1e6)
		}
	}
	for _, es := range byKey {
		// Order: consecutive distinct offsets of the key, first handlings.
		var offs []int64
		seen := map[int64]bool{}
		for _, e := range es {
			if !seen[e.Offset] {
				seen[e.Offset] = true
				offs = append(offs, e.Offset)
			}
		}
		sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
		p := es[0].Partition
		for i := 1; i < len(offs); i++ {
			if first[po{p, offs[i]}].Start < first[po{p, offs[i-1]}].End {
				r.OrderViolations++
			}
		}
		// Overlaps: sweep all handlings of the key by start time.
		sort.Slice(es, func(i, j int) bool { return es[i].Start < es[j].Start })
		var maxEnd int64
		for i, e := range es {
			if i > 0 && e.Start < maxEnd {
				r.Overlaps++
			}
			maxEnd = max(maxEnd, e.End)
		}
	}
	return r
}

// WorkMicros is the simulated work of a record: a splitmix64 hash of its
// offset and partition, uniform in [0, maxMicros]. keyshare.peers.Work in
// the Java drivers computes the same.
func WorkMicros(partition int32, offset, maxMicros int64) int64 {
	x := uint64(offset)*0x9E3779B97F4A7C15 + uint64(partition)
	x ^= x >> 31
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 29
	return int64(x % uint64(maxMicros+1))
}
