package statestore

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keyshare/keyshare/ledger"
)

// TestReadyWhileRestoring: a range whose restore is under way makes the
// Store not ready, naming the range and how far it has read, and shows in
// the gauges; once it is done the Store is ready again.
func TestReadyWhileRestoring(t *testing.T) {
	s := &Store{held: make(grants)}
	g := &grant{topic: "events", partition: 3, rng: ledger.HashRange{Lo: 0, Hi: 1 << 31}, token: 7}
	g.progress.end.Store(5000)
	g.progress.next.Store(1200)
	s.held.replace(g)
	err := s.Ready()
	if err == nil || !strings.Contains(err.Error(), "events/3 [0,2147483648) 1200 of 5000 changelog records read") {
		t.Fatalf("Ready while restoring: %v", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.Collector())
	if n := gauge(t, reg, "keyshare_state_restore_remaining_records"); n != 3800 {
		t.Errorf("records left to read: %v, want 3800", n)
	}
	g.progress.done.Store(true)
	if err := s.Ready(); err != nil {
		t.Errorf("Ready after the restore: %v", err)
	}
}

// gauge is the value of gauge name in reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
