package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The house's size rules for code (tests and generated code aside): a file
// is a few hundred lines, at most maxFileLines; a function over
// maxFuncLines says why in a paragraph of its doc comment that begins
// "Length:", or is cut.
const (
	maxFileLines = 500
	maxFuncLines = 80
)

// TestSizes holds every Go file of the module to the size rules and names
// each file and function that breaks them.
func TestSizes(t *testing.T) {
	files := goFiles(t, "..")
	if len(files) < 100 {
		t.Fatalf("found %d Go files under the module's root; want the whole module", len(files))
	}
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			t.Fatalf("parse %s: %v", path, err)
		}
		if ast.IsGenerated(f) {
			continue
		}
		name, _ := filepath.Rel("..", path)
		if n := fset.Position(f.End()).Line; n > maxFileLines {
			t.Errorf("%s is %d lines, over %d: split it by concept", name, n, maxFileLines)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			start, end := fset.Position(fd.Pos()).Line, fset.Position(fd.End()).Line
			if n := end - start + 1; n > maxFuncLines && !hasLengthReason(fd.Doc) {
				t.Errorf("%s:%d: %s is %d lines, over %d: cut it into named steps, or say why it is one in a doc comment paragraph beginning \"Length:\"", name, start, fd.Name.Name, n, maxFuncLines)
			}
		}
	}
}

// hasLengthReason reports whether a doc comment has a paragraph beginning
// "Length:".
func hasLengthReason(doc *ast.CommentGroup) bool {
	if doc == nil {
		return false
	}
	for _, line := range strings.Split(doc.Text(), "\n") {
		if strings.HasPrefix(line, "Length:") {
			return true
		}
	}
	return false
}

// goFiles lists the module's Go files other than tests, leaving out
// testdata, hidden folders and other modules' trees.
func goFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "bin") {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
