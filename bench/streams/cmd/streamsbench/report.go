package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/internal/devcluster"
)

// report is the Markdown of a run: where and how it was measured, and one
// table row per setup.
func (b *bench) report(rows []row, t0 time.Time, load0 string) string {
	var s strings.Builder
	host, _ := os.Hostname()
	_, rdk := kafka.LibraryVersion()
	fmt.Fprintf(&s, "Measured by `streamsbench %s` (%d records over %d keys, a lookup of %s; each row the median of %d runs by records/s, the range in brackets) on %s: %d CPUs, %s, %s, from %s UTC for %s; load average (1, 5, 15 min) %s at the start, %s at the end. One Apache Kafka %s broker (internal/devcluster); Kafka Streams %s on %s; keyshare members in the runner's process, with librdkafka %s, and one embedded etcd.\n\n",
		strings.Join(os.Args[1:], " "), b.records, b.keys, b.lookup, b.runs, host, runtime.NumCPU(), runtime.Version(), time.Now().UTC().Format("2006-01-02"),
		t0.UTC().Format("15:04"), time.Since(t0).Round(time.Second), load0, loadavg(), devcluster.ApacheKafkaVersion,
		devcluster.ApacheKafkaVersion, javaVersion(), rdk)
	fmt.Fprintf(&s, "| input | setup | records at once | records/s | × Streams | ceiling (at once ÷ lookup) | first → last | Store's own time a record | counts |\n|---|---|---|---|---|---|---|---|---|\n")
	var base float64
	for _, r := range rows {
		if r.system == streams && r.elapsed > 0 {
			base = r.rate()
		}
		ratio := "—"
		if r.system != streams && base > 0 {
			ratio = fmt.Sprintf("%.1f", r.rate()/base)
		}
		conc := r.instances * r.parallel
		ceiling := "—"
		if b.lookup > 0 {
			ceiling = fmt.Sprintf("%.0f", float64(conc)/b.lookup.Seconds())
		}
		dup := ""
		switch {
		case r.handled < 0:
			dup = " (handlings not counted)"
		case r.handled != int64(r.records):
			dup = fmt.Sprintf(" (%d handlings)", r.handled)
		}
		own := "—"
		if r.system == keyshare {
			own = fmt.Sprintf("%.2f ms", float64(r.storeOwn)/float64(time.Millisecond))
		}
		rate, took := "—", "—"
		if r.elapsed > 0 {
			rate, took = fmt.Sprintf("%.0f", r.rate()), fmt.Sprintf("%.1f s", r.elapsed.Seconds())
			if r.runs > 1 {
				rate += fmt.Sprintf(" [%.0f–%.0f]", r.lowest, r.highest)
			}
		} else {
			ratio = "—"
		}
		fmt.Fprintf(&s, "| %s | %s | %d | %s | %s | %s | %s%s | %s | %s |\n",
			plural(int(r.partitions), "partition"), r.setup, conc, rate, ratio, ceiling, took, dup, own, r.counts)
	}
	return s.String()
}

func javaVersion() string {
	out, err := exec.Command("java", "-version").CombinedOutput()
	if err != nil {
		return "java"
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(first)
}
