package consumer

import (
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// modulePath is keyshare's module: its version is the one the build info
// reports, whether keyshare is the main module (the keyshare binary) or a
// dependency of the service.
const modulePath = "github.com/keyshare/keyshare"

// buildLabels are keyshare_build_info's labels: keyshare's module version
// ("(devel)" when built from its own tree, "unknown" without build
// information), the VCS revision of the main module (empty if the build
// did not stamp one), and the Go version.
func buildLabels(bi *debug.BuildInfo, ok bool) (version, revision, goVersion string) {
	version, goVersion = "unknown", runtime.Version()
	if !ok || bi == nil {
		return version, "", goVersion
	}
	if bi.GoVersion != "" {
		goVersion = bi.GoVersion
	}
	if bi.Main.Path == modulePath {
		version = bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == modulePath {
			version = d.Version
			if d.Replace != nil && d.Replace.Version != "" {
				version = d.Replace.Version
			}
		}
	}
	if version == "" {
		version = "(devel)"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			revision = s.Value
		}
	}
	return version, revision, goVersion
}

// newBuildInfo is the keyshare_build_info gauge (always 1).
func newBuildInfo() prometheus.Collector {
	version, revision, goVersion := buildLabels(debug.ReadBuildInfo())
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "keyshare_build_info",
		Help:        "Always 1; its labels name keyshare's version, the build's VCS revision and the Go version.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "go_version": goVersion},
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
