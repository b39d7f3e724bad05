package deliver

import (
	"os"
	"regexp"
	"slices"
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
	ch := make(chan *prometheus.Desc)
	go func() { newMetrics().Describe(ch); close(ch) }()
	var exported []string
	name := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range ch {
		exported = append(exported, name.FindStringSubmatch(d.String())[1])
	}
	slices.Sort(documented)
	slices.Sort(exported)
	if !slices.Equal(documented, exported) {
		t.Errorf("docs/delivery.md lists %v; an Endpoint exports %v", documented, exported)
	}
}
