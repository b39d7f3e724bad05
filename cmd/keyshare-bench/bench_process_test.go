package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMetricReadsLabelledSample: a member's samples carry its group
// label; metric finds them by name, not a longer name sharing the prefix.
func TestMetricReadsLabelledSample(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "# HELP keyshare_generation x\nkeyshare_generation_seen{group=\"g\"} 9\nkeyshare_generation{group=\"g\"} 3\nplain 7\n")
	}))
	defer srv.Close()
	m := &benchMember{metrics: strings.TrimPrefix(srv.URL, "http://")}
	for name, want := range map[string]float64{"keyshare_generation": 3, "plain": 7, "absent": -1} {
		if got := m.metric(name); got != want {
			t.Errorf("metric(%q) = %v, want %v", name, got, want)
		}
	}
}
