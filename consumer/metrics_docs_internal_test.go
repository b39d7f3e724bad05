package consumer

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// exportedMetrics are the names of every metric a member with a
// BatchHandler registers, the leader's included.
func exportedMetrics(t *testing.T) []string {
	c := &Consumer{cfg: Config{Group: "g", BatchHandler: func(context.Context, []*kafka.Message) []error { return nil }}, log: hclog.NewNullLogger()}
	c.registry = c.newRegistry()
	ch := make(chan *prometheus.Desc, 100)
	go func() { c.registry.Describe(ch); close(ch) }()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	var names []string
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		names = append(names, m[1])
	}
	slices.Sort(names)
	return names
}

// TestMetricsDocumented: docs/operations.md's table lists every metric a
// member exports, and no other keyshare metric.
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(keyshare_[a-z_]+)").FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = true
	}
	exported := exportedMetrics(t)
	if len(exported) < 40 {
		t.Fatalf("only %d metrics described: %v", len(exported), exported)
	}
	for _, n := range exported {
		if !documented[n] {
			t.Errorf("%s is not in docs/operations.md's metric table", n)
		}
		delete(documented, n)
	}
	for n := range documented {
		t.Errorf("docs/operations.md lists %s, which no member exports", n)
	}
}

// TestDashboard: docs/grafana-dashboard.json parses, has the group and
// instance variables, and every keyshare metric its panels query is one a
// member exports, selected by group.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile("../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Templating struct {
			List []struct{ Name string }
		}
		Panels []struct {
			ID      int
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	var vars []string
	for _, v := range dash.Templating.List {
		vars = append(vars, v.Name)
	}
	for _, want := range []string{"datasource", "group", "instance"} {
		if !slices.Contains(vars, want) {
			t.Errorf("dashboard variables %v: no %s", vars, want)
		}
	}
	exported := exportedMetrics(t)
	use := regexp.MustCompile(`(keyshare_[a-z_]+)(\{[^}]*\})?`)
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		for _, tg := range p.Targets {
			for _, m := range use.FindAllStringSubmatch(tg.Expr, -1) {
				name := m[1]
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if base, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(exported, base) {
						name = base
					}
				}
				if strings.HasPrefix(name, "keyshare_deliver_") {
					continue // package deliver's, checked by its TestDashboard
				}
				if !slices.Contains(exported, name) {
					t.Errorf("panel %q queries %s, which no member exports", p.Title, m[1])
				}
				if !strings.Contains(m[2], `group=~"$group"`) {
					t.Errorf("panel %q: %s not selected by $group", p.Title, m[0])
				}
			}
		}
	}
}
