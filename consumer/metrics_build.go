package consumer

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/keyshare/keyshare/internal/version"
)

// newBuildInfo is the keyshare_build_info gauge (always 1).
func newBuildInfo() prometheus.Collector {
	b := version.Running()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "keyshare_build_info",
		Help:        "Always 1; its labels name keyshare's version, the build's VCS revision and the Go version.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "go_version": b.Go},
	})
	g.Set(1)
	return g
}

// processMetrics gathers the Go runtime's and the process's metrics
// (go_*, process_*). They describe the process, not a member, so they are
// not in a member's Metrics: a service gathering two members there would
// collect them twice. HTTPHandler serves them beside the member's.
var processMetrics = sync.OnceValue(func() prometheus.Gatherer {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
})
