package consumer_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// goBlock is a fenced Go code block of a Markdown file.
var goBlock = regexp.MustCompile("(?s)\n```go\n(.*?)\n```\n")

// TestREADMEExample: the README's Go example is a program that compiles as
// shown (imports complete, no undefined names) against this module's
// packages: it is written into a directory inside the module and vetted.
func TestREADMEExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlock.FindAllSubmatch(readme, -1)
	if len(blocks) != 1 {
		t.Fatalf("README.md has %d Go code blocks, want 1 (the embedding example)", len(blocks))
	}
	// Inside the module, so that its imports resolve to this module's
	// packages at go.mod's versions; a name starting with _ keeps it out
	// of ./... patterns while it lasts.
	dir, err := os.MkdirTemp(".", "_readme-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "main.go"), append(blocks[0][1], '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("go", "vet", "./"+filepath.ToSlash(dir)).CombinedOutput(); err != nil {
		t.Fatalf("the README's Go example does not build: go vet: %v\n%s", err, out)
	}
}
