package consumer

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestMetricsServerLimits: the metrics server closes keep-alive
// connections left idle and connections that never finish their request
// headers, and refuses oversized headers. Its limits are shortened here so
// the test is quick; the defaults are checked to be set.
func TestMetricsServerLimits(t *testing.T) {
	for name, d := range map[string]time.Duration{"read header": metricsLimits.readHeader, "read": metricsLimits.read,
		"write": metricsLimits.write, "idle": metricsLimits.idle} {
		if d <= 0 || d > 2*time.Minute {
			t.Errorf("default %s timeout %s: want a bound of at most two minutes", name, d)
		}
	}
	if metricsLimits.maxHeaderBytes <= 0 || metricsLimits.maxHeaderBytes > 64<<10 {
		t.Errorf("default header bound %d: want at most 64 KiB", metricsLimits.maxHeaderBytes)
	}
	saved := metricsLimits
	t.Cleanup(func() { metricsLimits = saved })
	metricsLimits = serverLimits{readHeader: 300 * time.Millisecond, read: time.Second, write: time.Second, idle: 300 * time.Millisecond, maxHeaderBytes: 4 << 10}

	c := &Consumer{cfg: Config{MetricsAddr: "127.0.0.1:0"}, log: hclog.NewNullLogger()}
	c.registry = c.newRegistry()
	c.mu.running = true
	stop, err := c.serveMetrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	addr := c.MetricsAddr()

	// Keep-alive connections, each after one request, then idle.
	var idle []net.Conn
	for range 20 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("healthz: %v %v", resp, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		idle = append(idle, conn)
	}
	// A client that starts its request headers and never ends them.
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprintf(slow, "GET /metrics HTTP/1.1\r\nHost: x\r\n")

	closed := func(conn net.Conn) bool {
		_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, err := conn.Read(make([]byte, 512))
		return err == io.EOF || err != nil && strings.Contains(err.Error(), "reset")
	}
	open := 0
	for _, conn := range idle {
		if !closed(conn) {
			open++
		}
	}
	if open > 0 {
		t.Errorf("%d of %d idle keep-alive connections still open", open, len(idle))
	}
	if !closed(slow) {
		t.Errorf("a connection that never ended its request headers is still open")
	}

	req, _ := http.NewRequest("GET", "http://"+addr+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 64<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("64 KiB of headers: status %d, want 431", resp.StatusCode)
	}
}

// TestHotKeySeries: keyshare_hot_key_busy_ratio has a series per hot key
// of the ranges owned now, and none for a key that dropped out or a range
// that left; keys of one partition showing the same text share a series.
func TestHotKeySeries(t *testing.T) {
	long := strings.Repeat("k", 64) + "... (300 bytes)"
	a := RangeStatus{Topic: "t", Partition: 0, Lo: 0, Hi: 1 << 31, HotKeys: []HotKey{{Key: "acct-42", BusyPerSec: 0.5}, {Key: long, BusyPerSec: 0.1}}}
	b := RangeStatus{Topic: "t", Partition: 0, Lo: 1 << 31, Hi: 1 << 32, HotKeys: []HotKey{{Key: long, BusyPerSec: 0.2}}}
	c := RangeStatus{Topic: "t", Partition: 1, Lo: 0, Hi: 1 << 32, HotKeys: []HotKey{{Key: "acct-42", BusyPerSec: 0.3}}}
	series := func(ranges ...RangeStatus) map[string]float64 {
		out := map[string]float64{}
		for s, v := range hotKeySeries(ranges) {
			out[fmt.Sprintf("%s/%d %s", s.Topic, s.Partition, s.key)] = math.Round(v*1000) / 1000
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		ranges []RangeStatus
		want   map[string]float64
	}{
		{"all", []RangeStatus{a, b, c}, map[string]float64{"t/0 acct-42": 0.5, "t/0 " + long: 0.3, "t/1 acct-42": 0.3}},
		{"range b left", []RangeStatus{a, c}, map[string]float64{"t/0 acct-42": 0.5, "t/0 " + long: 0.1, "t/1 acct-42": 0.3}},
		{"c's key cooled", []RangeStatus{a, {Topic: "t", Partition: 1, Lo: 0, Hi: 1 << 32}}, map[string]float64{"t/0 acct-42": 0.5, "t/0 " + long: 0.1}},
		{"no range", nil, map[string]float64{}},
	} {
		if got := series(tc.ranges...); !maps.Equal(got, tc.want) {
			t.Errorf("%s: series %v, want %v", tc.name, got, tc.want)
		}
	}
}
