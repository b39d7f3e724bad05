package assign

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsArePure holds the package to pure decisions: apart from the
// standard library it may import only the ledger (hash ranges) and what the
// ledger imports. etcd, Kafka clients and coord stay out, so the assignor
// can be read, tested and reused without them.
func TestImportsArePure(t *testing.T) {
	allowed := map[string]bool{
		"github.com/keyshare/keyshare/assign":              true,
		"github.com/keyshare/keyshare/ledger":              true,
		"github.com/keyshare/keyshare/internal/strictjson": true,
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
			t.Errorf("package assign depends on %s: it must stay pure (standard library, ledger and the ledger's imports); move the code that needs %s to coord or consumer", dep, dep)
		}
	}
}
