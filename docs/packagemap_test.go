// Package docs holds one test: docs/design.md's package map, held to the
// code. The map gives every package of the module a floor, what it is for
// and who may import it, and lists the pure packages with what they may use
// outside the module; this test reads both tables and the imports that
// `go list` reports, and fails on any import the map does not allow.
package docs

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/keyshare/keyshare"

// entry is one row of the package map.
type entry struct {
	floor     int
	importers []string // patterns: a package, "pkg/..." for its tree, "tests", "any"
}

// listed is one package as `go list -json` reports it; Deps is everything
// it depends on, directly or not.
type listed struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Deps         []string
	Standard     bool
}

// TestPackageMap checks four rules of the map against the code: every
// package is on the map and every row names a package; each import (test
// files' too) is one the importee's "who may import it" allows; each
// non-test import runs to a lower floor, so the layout has no cycle and
// nothing imports upward; and each pure package's dependencies outside the
// standard library are those its row in the second table allows.
func TestPackageMap(t *testing.T) {
	rows, pure := readMap(t, "design.md")
	pkgs := goList(t)

	for name := range pkgs {
		if _, ok := rows[name]; !ok {
			t.Errorf("package %s is not on docs/design.md's package map: add a row (floor, what it is for, who may import it)", name)
		}
	}
	for name := range rows {
		if _, ok := pkgs[name]; !ok {
			t.Errorf("docs/design.md's package map names %s, which is not a package of the module: remove or rename the row", name)
		}
	}

	for name, p := range pkgs {
		row, ok := rows[name]
		if !ok {
			continue
		}
		for _, imp := range ours(p.Imports) {
			to, ok := rows[imp]
			if !ok {
				continue
			}
			if to.floor >= row.floor {
				t.Errorf("%s (floor %d) imports %s (floor %d): an import runs to a lower floor only; move the code or change the floors in docs/design.md", name, row.floor, imp, to.floor)
			}
			if !allowed(to.importers, name, false) {
				t.Errorf("%s imports %s, whose row in docs/design.md does not list it among who may import it (%s)", name, imp, strings.Join(to.importers, ", "))
			}
		}
		for _, imp := range ours(append(slices.Clone(p.TestImports), p.XTestImports...)) {
			if to, ok := rows[imp]; ok && imp != name && !allowed(to.importers, name, true) {
				t.Errorf("the tests of %s import %s, whose row in docs/design.md does not list them among who may import it (%s)", name, imp, strings.Join(to.importers, ", "))
			}
		}
	}

	for name, rule := range pure {
		p, ok := pkgs[name]
		if !ok {
			t.Errorf("docs/design.md's pure packages name %s, which is not a package of the module", name)
			continue
		}
		for _, dep := range p.Deps {
			if standard(dep) || strings.TrimPrefix(dep, module+"/") == name {
				continue
			}
			short := strings.TrimPrefix(dep, module+"/")
			if !slices.Contains(rule, short) {
				t.Errorf("pure package %s depends on %s, which its row in docs/design.md's pure packages does not allow: the decisions stay free of etcd, Kafka and I/O; the code that needs %s belongs in an adapter", name, dep, dep)
			}
		}
	}
}

// allowed reports whether importer matches one of the patterns.
func allowed(patterns []string, importer string, test bool) bool {
	for _, p := range patterns {
		switch {
		case p == "any":
			return true
		case p == "tests":
			if test {
				return true
			}
		case strings.HasSuffix(p, "/..."):
			root := strings.TrimSuffix(p, "/...")
			if importer == root || strings.HasPrefix(importer, root+"/") {
				return true
			}
		case p == importer:
			return true
		}
	}
	return false
}

// ours keeps the module's own packages, by their path inside the module.
func ours(imports []string) []string {
	var out []string
	for _, imp := range imports {
		if rest, ok := strings.CutPrefix(imp, module+"/"); ok {
			out = append(out, rest)
		}
	}
	return out
}

// standard reports whether a dependency is of the standard library, as go
// list names them: no dot in the first path element.
func standard(dep string) bool {
	first, _, _ := strings.Cut(dep, "/")
	return !strings.Contains(first, ".")
}

// goList lists the module's packages with their imports and dependencies,
// by their paths inside the module.
func goList(t *testing.T) map[string]listed {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH to list the packages' imports: %v", err)
	}
	cmd := exec.Command(gobin, "list", "-json", module+"/...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s/...: %v", module, err)
	}
	pkgs := map[string]listed{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs[strings.TrimPrefix(p.ImportPath, module+"/")] = p
	}
	return pkgs
}

// readMap reads the two tables of the package map: rows of "| `pkg/` |
// floor | what it is for | who may import it |" under the heading
// "## Packages", and rows of "| `pkg/` | what it may use |" under
// "### Pure packages". A package is written with a trailing slash; in the
// last column, names in backquotes are the patterns and the rest is prose.
func readMap(t *testing.T, path string) (map[string]entry, map[string][]string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open the package map: %v", err)
	}
	defer f.Close()
	rows := map[string]entry{}
	pure := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if strings.HasPrefix(text, "#") {
			section = strings.TrimSpace(strings.TrimLeft(text, "#"))
			continue
		}
		if !strings.HasPrefix(text, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(text, "|"), "|")
		name := strings.TrimSuffix(strings.Trim(strings.TrimSpace(cells[0]), "`"), "/")
		switch section {
		case "Packages":
			if len(cells) != 4 {
				t.Fatalf("%s:%d: a package map row has 4 cells (package, floor, what it is for, who may import it), got %d", path, line, len(cells))
			}
			floor, err := strconv.Atoi(strings.TrimSpace(cells[1]))
			if err != nil {
				t.Fatalf("%s:%d: floor %q of %s is not a number", path, line, strings.TrimSpace(cells[1]), name)
			}
			if _, dup := rows[name]; dup {
				t.Fatalf("%s:%d: %s has two rows", path, line, name)
			}
			rows[name] = entry{floor: floor, importers: quoted(cells[3])}
		case "Pure packages":
			if len(cells) != 2 {
				t.Fatalf("%s:%d: a pure package row has 2 cells (package, what it may use), got %d", path, line, len(cells))
			}
			pure[name] = quoted(cells[1])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	if len(rows) == 0 || len(pure) == 0 {
		t.Fatalf("%s: no package map found (want the tables under \"## Packages\" and \"### Pure packages\")", path)
	}
	return rows, pure
}

// quoted returns the backquoted names in a cell, trailing slashes cut.
func quoted(cell string) []string {
	var out []string
	parts := strings.Split(cell, "`")
	for i := 1; i < len(parts); i += 2 {
		out = append(out, strings.TrimSuffix(parts[i], "/"))
	}
	return out
}

// TestQuoted pins the cell syntax the map is written in.
func TestQuoted(t *testing.T) {
	got := fmt.Sprint(quoted(" `coord/`, `cmd/...` and tests of `admin` "))
	if got != "[coord cmd/... admin]" {
		t.Fatalf("quoted = %s", got)
	}
}
