package state

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsArePure holds the package to pure code: apart from the
// standard library it may import only the assignor's types, the ledger, the
// key schema and the strict JSON and text helpers, and what they import.
// etcd and Kafka clients stay out, so the stored state can be decoded,
// tested and reasoned about without them.
func TestImportsArePure(t *testing.T) {
	allowed := map[string]bool{
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
			t.Errorf("package state depends on %s: it must stay pure (no etcd, no Kafka); move the code that needs %s to coord", dep, dep)
		}
	}
}
