package consumer

import (
	"context"
	"io"
	"net/http/httptest"
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
