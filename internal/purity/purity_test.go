// Package purity holds keyshare's pure packages to their imports: the
// decisions (the assignor, the planner, the ledger, the scheduler) and the
// stored state import no etcd and no Kafka client, so they can be read,
// tested and reasoned about without them. docs/design.md's package map
// gives each package's rule; this test is that rule, run with go list.
package purity

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/keyshare/keyshare/"

// pure maps each pure package to the packages outside the standard library
// it may depend on (directly or not), besides itself.
var pure = map[string][]string{
	"ledger":                     {"internal/strictjson", "github.com/cespare/xxhash/v2"},
	"assign":                     {"ledger", "internal/strictjson", "github.com/cespare/xxhash/v2"},
	"schema":                     {"assign", "ledger", "internal/strictjson", "internal/textsafe", "github.com/cespare/xxhash/v2"},
	"coord/internal/plan":        {"schema", "assign", "ledger", "internal/strictjson", "internal/textsafe", "github.com/cespare/xxhash/v2"},
	"consumer/internal/schedule": {},
	"internal/strictjson":        {},
	"internal/textsafe":          {},
	"internal/version":           {},
}

// TestImportsArePure lists each pure package's dependencies and fails on
// any not in its rule, naming the package and the dependency.
func TestImportsArePure(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH to list the packages' imports: %v", err)
	}
	for pkg, rule := range pure {
		t.Run(pkg, func(t *testing.T) {
			out, err := exec.Command(gobin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", module+pkg).CombinedOutput()
			if err != nil {
				t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
			}
			for _, dep := range strings.Fields(string(out)) {
				name := strings.TrimPrefix(dep, module)
				if name == pkg || slices.Contains(rule, name) {
					continue
				}
				t.Errorf("package %s depends on %s: it must stay pure (no etcd, no Kafka client; its rule in docs/design.md); the code that needs %s belongs in coord or consumer", pkg, dep, dep)
			}
		})
	}
}
