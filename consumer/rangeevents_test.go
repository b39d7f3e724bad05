package consumer

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/ledger"
)

func TestRangeEventsLog(t *testing.T) {
	events := func(n int) []rangeEvent {
		out := make([]rangeEvent, n)
		for i := range out {
			out[i] = rangeEvent{tp{Topic: "orders", Partition: int32(i)}, ledger.HashRange{Lo: 0, Hi: ledger.HashSpace}, []any{"watermark", 7}}
		}
		return out
	}
	logged := func(level hclog.Level, e rangeEvents) []string {
		var buf bytes.Buffer
		e.log(hclog.New(&hclog.LoggerOptions{Output: &buf, Level: level}))
		return strings.Split(strings.TrimSpace(buf.String()), "\n")
	}

	// A few ranges: a line each, with every field.
	lines := logged(hclog.Info, rangeEvents{acquired: events(rangeEventLines)})
	if len(lines) != rangeEventLines || !strings.Contains(lines[2], "range acquired: topic=orders partition=2 range=") || !strings.Contains(lines[2], "watermark=7") {
		t.Fatalf("%d acquired ranges logged as %q, want a line each", rangeEventLines, lines)
	}

	// Thousands: one line per kind, with the count and the first few.
	lines = logged(hclog.Info, rangeEvents{acquired: events(2048), dropped: events(4)})
	if len(lines) != 2 {
		t.Fatalf("2,048 acquired and 4 dropped ranges logged as %d lines, want 2: %q", len(lines), lines[:min(len(lines), 5)])
	}
	if !strings.Contains(lines[0], "ranges acquired: count=2048") || !strings.Contains(lines[0], "orders/0 ") || !strings.Contains(lines[0], "and 2045 more") {
		t.Fatalf("summary %q: want the count, the first ranges and how many more", lines[0])
	}
	if !strings.Contains(lines[1], "ranges dropped: count=4") {
		t.Fatalf("summary %q, want the 4 dropped ranges", lines[1])
	}

	// At debug, each range still has its own line too.
	lines = logged(hclog.Debug, rangeEvents{revoked: events(5)})
	if len(lines) != 6 || !strings.Contains(lines[5], "range revoked; draining: topic=orders partition=4") {
		t.Fatalf("5 revoked ranges at debug logged as %q, want the summary and a line each", lines)
	}
}
