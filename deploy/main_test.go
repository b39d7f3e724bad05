package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/keyshare/keyshare/testutil"
)

// keyshareBin is keyshare built as the Dockerfile's builder builds it (its
// go build command, read from the Dockerfile, with cgo on), once for the
// package's tests.
var keyshareBin string

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "keyshare-deploy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	keyshareBin = filepath.Join(dir, "keyshare")
	if err := buildAsDockerfile(keyshareBin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return testutil.RunTests(m)
}

// buildAsDockerfile runs the builder stage's go build from the
// repository's root, its output to out.
func buildAsDockerfile(out string) error {
	stages, err := parseDockerfile("Dockerfile")
	if err != nil {
		return err
	}
	build, err := stages[0].goBuild()
	if err != nil {
		return err
	}
	cmd := exec.Command("go", build.withOutput(out)...)
	cmd.Dir = ".."
	cmd.Env = os.Environ()
	for k, v := range stages[0].env() {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s (the Dockerfile's build): %w\n%s", cmd, err, b)
	}
	return nil
}
