package consumer

import (
	"context"
	"io"
	"net/http/httptest"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsOfTwoGroups: the members of two groups in one process are
// gathered together without a collision, every keyshare metric of each
// carrying its group; and a member's HTTPHandler serves the Go runtime's
// and the process's metrics as well, which Metrics leaves out.
func TestMetricsOfTwoGroups(t *testing.T) {
	member := func(group string) *Consumer {
		c := &Consumer{cfg: Config{Group: group, MemberID: group + "-1", BatchHandler: func(context.Context, []*kafka.Message) []error { return nil }}, log: hclog.NewNullLogger()}
		c.registry = c.newRegistry()
		return c
	}
	a, b := member("orders"), member("payments")
	a.metrics.handled.Add(3)
	b.metrics.handled.Add(5)
	families, err := prometheus.Gatherers{a.Metrics(), b.Metrics()}.Gather()
	if err != nil {
		t.Fatalf("gathering two groups' members: %v", err)
	}
	handled := map[string]float64{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "keyshare_") {
			t.Errorf("Metrics has %s: want only keyshare's metrics", f.GetName())
		}
		for _, m := range f.GetMetric() {
			group := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "group" {
					group = l.GetValue()
				}
			}
			if group != "orders" && group != "payments" {
				t.Errorf("%s: group %q", f.GetName(), group)
			}
			if f.GetName() == "keyshare_records_handled_total" {
				handled[group] = m.GetCounter().GetValue()
			}
		}
	}
	if handled["orders"] != 3 || handled["payments"] != 5 {
		t.Errorf("handled by group: %v, want orders 3 and payments 5", handled)
	}

	rec := httptest.NewRecorder()
	a.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{"go_goroutines ", "process_cpu_seconds_total ", `keyshare_build_info{go_version="`,
		`keyshare_member_info{group="orders",member="orders-1"} 1`, `keyshare_records_handled_total{group="orders"} 3`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
}

// TestBuildLabels: keyshare's version is the main module's or the
// dependency's (a replacement's if it has one), the revision is the VCS
// stamp, and a build without information still reports the Go version.
func TestBuildLabels(t *testing.T) {
	rev := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "abc123"}}
	for _, tc := range []struct {
		name                 string
		bi                   *debug.BuildInfo
		ok                   bool
		version, revision, g string
	}{
		{"no build info", nil, false, "unknown", "", ""},
		{"keyshare binary", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: modulePath, Version: "v1.4.0"}, Settings: rev}, true, "v1.4.0", "abc123", "go1.26.8"},
		{"built in its tree", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: modulePath, Version: "(devel)"}}, true, "(devel)", "", "go1.26.8"},
		{"a service's dependency", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/svc", Version: "v2.0.0"},
			Deps: []*debug.Module{{Path: "golang.org/x/sys", Version: "v0.1.0"}, {Path: modulePath, Version: "v1.3.2"}}, Settings: rev}, true, "v1.3.2", "abc123", "go1.26.8"},
		{"replaced dependency", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/svc"},
			Deps: []*debug.Module{{Path: modulePath, Version: "v1.3.2", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.3.3"}}}}, true, "v1.3.3", "", "go1.26.8"},
		{"keyshare not in the build", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/svc"}}, true, "unknown", "", "go1.26.8"},
	} {
		v, r, g := buildLabels(tc.bi, tc.ok)
		if tc.g == "" {
			tc.g = g // runtime.Version: whatever built the test
		}
		if v != tc.version || r != tc.revision || g != tc.g {
			t.Errorf("%s: %q %q %q, want %q %q %q", tc.name, v, r, g, tc.version, tc.revision, tc.g)
		}
	}
}
