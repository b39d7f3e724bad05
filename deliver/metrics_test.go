package deliver

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsDocumented: docs/delivery.md's metric table lists exactly the
// metrics an Endpoint exports.
func TestMetricsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/delivery.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(keyshare_deliver_[a-z_]+)").FindAllStringSubmatch(string(doc), -1) {
		documented = append(documented, m[1])
	}
	exported := exportedMetrics()
	slices.Sort(documented)
	if !slices.Equal(documented, exported) {
		t.Errorf("docs/delivery.md lists %v; an Endpoint exports %v", documented, exported)
	}
}

// exportedMetrics names the metrics an Endpoint exports, sorted.
func exportedMetrics() []string {
	ch := make(chan *prometheus.Desc)
	go func() { newMetrics().Describe(ch); close(ch) }()
	var exported []string
	name := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range ch {
		exported = append(exported, name.FindStringSubmatch(d.String())[1])
	}
	slices.Sort(exported)
	return exported
}

// TestDashboard: docs/grafana-dashboard.json shows every delivery metric,
// and its delivery panels query only metrics an Endpoint exports, each
// selected by the dashboard's group and instance (package consumer checks
// the rest of the dashboard).
func TestDashboard(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	exported := exportedMetrics()
	shown := map[string]bool{}
	use := regexp.MustCompile(`(keyshare_deliver_[a-z_]+)(\{[^}]*\})?`)
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range use.FindAllStringSubmatch(tg.Expr, -1) {
				name := strings.TrimSuffix(m[1], "_bucket")
				if !slices.Contains(exported, name) {
					t.Errorf("panel %q queries %s, which an Endpoint does not export", p.Title, m[1])
				}
				if !strings.Contains(m[2], `group=~"$group"`) || !strings.Contains(m[2], `instance=~"$instance"`) {
					t.Errorf("panel %q: %s not selected by $group and $instance", p.Title, m[0])
				}
				shown[name] = true
			}
		}
	}
	for _, name := range exported {
		if !shown[name] {
			t.Errorf("no dashboard panel shows %s", name)
		}
	}
}
