package plan

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsArePure holds the planner to pure decisions: apart from the
// standard library it may import only the stored state, the assignor, the
// ledger and the key schema, and what they import. etcd and Kafka clients
// stay out: the planner returns guards and writes as data, and coord alone
// turns them into transactions.
func TestImportsArePure(t *testing.T) {
	allowed := map[string]bool{
		"github.com/keyshare/keyshare/internal/plan":       true,
		"github.com/keyshare/keyshare/state":               true,
		"github.com/keyshare/keyshare/assign":              true,
		"github.com/keyshare/keyshare/ledger":              true,
		"github.com/keyshare/keyshare/internal/keys":       true,
		"github.com/keyshare/keyshare/internal/strictjson": true,
		"github.com/keyshare/keyshare/internal/textsafe":   true,
		"github.com/cespare/xxhash/v2":                     true,
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH to list the package's imports: %v", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if !allowed[dep] {
			t.Errorf("package plan depends on %s: the planner must stay pure (no etcd, no Kafka); the code that needs %s belongs to coord", dep, dep)
		}
	}
}
