package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/coord"
)

// parseTopicSpec reads a --topic value as kafka-consumer-groups does: T
// (every partition), T:P or T:P,P,... (those partitions).
func parseTopicSpec(spec string) ([]admin.Selector, error) {
	name, parts, hasParts := strings.Cut(spec, ":")
	if err := coord.CheckName("--topic", name); err != nil {
		return nil, err
	}
	if !hasParts {
		return []admin.Selector{{Topic: name, Partition: -1}}, nil
	}
	var sel []admin.Selector
	for _, p := range strings.Split(parts, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("--topic %q: %q is not a partition number; want T, T:P or T:P,P,... (e.g. orders:0,1,2)", spec, p)
		}
		sel = append(sel, admin.Selector{Topic: name, Partition: int32(n)})
	}
	return sel, nil
}

// isoDuration is ISO-8601's duration as Java's Duration.parse reads it
// (kafka-consumer-groups --by-duration): PnDTnHnMn.nS, days and a time
// part, each unit optional but at least one present.
var isoDuration = regexp.MustCompile(`^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d{1,9})?)S)?)?$`)

// parseISODuration reads a --by-duration value such as P1DT2H30M or PT15M.
// A negative duration (a time in the future) is refused.
func parseISODuration(s string) (time.Duration, error) {
	bad := fmt.Errorf("--by-duration %q: want an ISO-8601 duration PnDTnHnMnS, e.g. PT30M (30 minutes ago) or P1DT12H", s)
	m := isoDuration.FindStringSubmatch(strings.ToUpper(s))
	if m == nil || strings.HasSuffix(strings.ToUpper(s), "T") || (m[1] == "" && m[2] == "" && m[3] == "" && m[4] == "") {
		return 0, bad
	}
	var d time.Duration
	for i, unit := range []time.Duration{24 * time.Hour, time.Hour, time.Minute} {
		if m[i+1] == "" {
			continue
		}
		n, err := strconv.ParseInt(m[i+1], 10, 64)
		if err != nil || n > int64(1<<62)/int64(unit) {
			return 0, bad
		}
		d += time.Duration(n) * unit
	}
	if m[4] != "" {
		secs, err := time.ParseDuration(m[4] + "s")
		if err != nil {
			return 0, bad
		}
		d += secs
	}
	return d, nil
}

// datetimeLayouts are the --to-datetime forms kafka-consumer-groups takes
// (YYYY-MM-DDTHH:mm:SS.sss, the fraction optional), with a zone (Z,
// ±hh:mm, ±hhmm) or without.
var datetimeLayouts = []struct {
	layout string
	zoned  bool
}{
	{"2006-01-02T15:04:05.999999999Z07:00", true},
	{"2006-01-02T15:04:05.999999999Z0700", true},
	{"2006-01-02T15:04:05.999999999", false},
}

// parseDatetime reads a --to-datetime value. A time without a zone is in
// loc, the local time zone (TZ), as kafka-consumer-groups reads it in the
// JVM's default zone.
func parseDatetime(s string, loc *time.Location) (time.Time, error) {
	for _, l := range datetimeLayouts {
		if l.zoned {
			if t, err := time.Parse(l.layout, s); err == nil {
				return t, nil
			}
			continue
		}
		if t, err := time.ParseInLocation(l.layout, s, loc); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("--to-datetime %q: want YYYY-MM-DDTHH:mm:SS[.sss][zone], e.g. 2024-05-01T12:00:00Z, 2024-05-01T12:00:00+02:00, or 2024-05-01T12:00:00 (local time, %s)", s, loc)
}

// parseOffsetsCSV reads a --from-file plan: lines topic,partition,offset
// as kafka-consumer-groups --export writes them (and keyshare's --export).
// Blank lines are skipped; a partition given twice is refused.
func parseOffsetsCSV(name string, r io.Reader) ([]admin.PartitionOffset, error) {
	var out []admin.PartitionOffset
	seen := make(map[string]int)
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) != 3 {
			return nil, fmt.Errorf("--from-file %s line %d %q: want topic,partition,offset", name, n, line)
		}
		topic := strings.TrimSpace(f[0])
		if err := coord.CheckName("topic", topic); err != nil {
			return nil, fmt.Errorf("--from-file %s line %d: %w", name, n, err)
		}
		p, err := strconv.ParseInt(strings.TrimSpace(f[1]), 10, 32)
		if err != nil || p < 0 {
			return nil, fmt.Errorf("--from-file %s line %d %q: partition %q is not a partition number", name, n, line, f[1])
		}
		o, err := strconv.ParseInt(strings.TrimSpace(f[2]), 10, 64)
		if err != nil || o < 0 {
			return nil, fmt.Errorf("--from-file %s line %d %q: offset %q is not an offset (a number, 0 or more)", name, n, line, f[2])
		}
		key := topic + "/" + strconv.FormatInt(p, 10)
		if first, dup := seen[key]; dup {
			return nil, fmt.Errorf("--from-file %s line %d: %s is on line %d too; give each partition once", name, n, key, first)
		}
		seen[key] = n
		out = append(out, admin.PartitionOffset{Topic: topic, Partition: int32(p), Offset: o})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--from-file %s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--from-file %s: no topic,partition,offset line", name)
	}
	return out, nil
}

// writeOffsetsCSV writes plan as --export does: topic,partition,offset
// per line, what --from-file reads back.
func writeOffsetsCSV(w io.Writer, plan []admin.PlanRow) error {
	for _, r := range plan {
		if _, err := fmt.Fprintf(w, "%s,%d,%d\n", r.Topic, r.Partition, r.New); err != nil {
			return err
		}
	}
	return nil
}
