package deploy

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// runtimeFiles is runtime-files.txt: what the image's base gives keyshare.
type runtimeFiles struct {
	base  string
	files []string // copied from this machine
	dirs  []rootDir
	lines []fileLine // written in order, a file's lines together
	env   []string   // NAME=VALUE
}

type rootDir struct {
	path string
	mode fs.FileMode
	uid  int
}

type fileLine struct{ path, text string }

// readRuntimeFiles parses runtime-files.txt, failing the test on a line
// it does not understand.
func readRuntimeFiles(t *testing.T) *runtimeFiles {
	t.Helper()
	f, err := os.Open("runtime-files.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rf := &runtimeFiles{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := rf.add(line); err != nil {
			t.Fatalf("runtime-files.txt:%d: %v", n, err)
		}
	}
	if rf.base == "" {
		t.Fatal("runtime-files.txt names no base")
	}
	return rf
}

func (rf *runtimeFiles) add(line string) error {
	kind, rest, _ := strings.Cut(line, " ")
	f := strings.Fields(rest)
	switch {
	case kind == "base" && len(f) == 1:
		rf.base = f[0]
	case kind == "file" && len(f) == 1:
		rf.files = append(rf.files, f[0])
	case kind == "env" && len(f) == 1 && strings.Contains(f[0], "="):
		rf.env = append(rf.env, f[0])
	case kind == "line" && len(f) >= 2:
		path, text, _ := strings.Cut(rest, " ")
		rf.lines = append(rf.lines, fileLine{path, text})
	case kind == "dir" && (len(f) == 2 || len(f) == 3):
		mode, err := strconv.ParseUint(f[1], 8, 32)
		if err != nil {
			return fmt.Errorf("dir %s: mode %q: want octal, such as 0755", f[0], f[1])
		}
		d := rootDir{path: f[0], mode: fs.FileMode(mode&0o777) | unixModeBits(mode)}
		if len(f) == 3 {
			if d.uid, err = strconv.Atoi(f[2]); err != nil {
				return fmt.Errorf("dir %s: uid %q: want a number", f[0], f[2])
			}
		}
		rf.dirs = append(rf.dirs, d)
	default:
		return fmt.Errorf("%q: want base, file, dir, line or env with their fields", line)
	}
	return nil
}

// unixModeBits turns the sticky, setgid and setuid bits of an octal mode
// into Go's.
func unixModeBits(mode uint64) fs.FileMode {
	var m fs.FileMode
	if mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	if mode&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if mode&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	return m
}

// nonrootUser is "UID:GID" of the nonroot line of the base's /etc/passwd.
func (rf *runtimeFiles) nonrootUser(t *testing.T) string {
	t.Helper()
	for _, l := range rf.lines {
		f := strings.Split(l.text, ":")
		if l.path == "/etc/passwd" && len(f) == 7 && f[0] == "nonroot" {
			return f[2] + ":" + f[3]
		}
	}
	t.Fatal("runtime-files.txt has no nonroot line in /etc/passwd")
	return ""
}

// requireDebian12 skips tests that take the base's files from this
// machine unless it runs the release the base is built from.
func requireDebian12(t *testing.T) {
	t.Helper()
	b, _ := os.ReadFile("/etc/os-release")
	if runtime.GOARCH != "amd64" || !strings.Contains(string(b), "\nID=debian") || !strings.Contains(string(b), `VERSION_ID="12"`) {
		t.Skipf("the base's files are taken from this machine, which must be Debian 12 on amd64 (%s); this is %s on %s",
			"the release of the base's packages", firstLine(string(b)), runtime.GOARCH)
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// assemble builds the base's file set under root.
func (rf *runtimeFiles) assemble(root string) error {
	for _, d := range rf.dirs {
		p := filepath.Join(root, d.path)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(p, d.mode); err != nil {
			return err
		}
		if err := os.Chown(p, d.uid, d.uid); err != nil {
			return err
		}
	}
	for _, f := range rf.files {
		if err := copyFile(f, filepath.Join(root, f), 0); err != nil {
			return err
		}
	}
	for _, l := range rf.lines {
		if err := appendLine(filepath.Join(root, l.path), l.text); err != nil {
			return err
		}
	}
	return nil
}

// copyFile copies src (following links) to dst, with src's mode unless
// mode is set.
func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if mode == 0 {
		mode = st.Mode().Perm()
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func appendLine(path, text string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(f, text); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// linkedFiles are the files `ldd` says bin loads: its libraries and the
// dynamic loader, as paths on this machine.
func linkedFiles(t *testing.T, bin string) []string {
	t.Helper()
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("ldd %s: %v\n%s", bin, err, out)
	}
	var files []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && f[1] == "=>":
			if f[2] == "not" {
				t.Fatalf("ldd: %s not found on this machine", f[0])
			}
			files = append(files, f[2])
		case len(f) == 2 && strings.HasPrefix(f[0], "/"):
			files = append(files, f[0])
		}
	}
	if len(files) == 0 {
		t.Fatalf("ldd %s names no library: %s", bin, out)
	}
	return files
}

// TestRuntimeFilesCoverTheBinary fails when keyshare loads a library the
// image's base does not have (runtime-files.txt lists the base's).
func TestRuntimeFilesCoverTheBinary(t *testing.T) {
	requireDebian12(t)
	rf := readRuntimeFiles(t)
	listed := map[string]bool{}
	for _, f := range rf.files {
		listed[f] = true
	}
	for _, f := range linkedFiles(t, keyshareBin) {
		if !listed[f] {
			t.Errorf("keyshare loads %s (ldd), which runtime-files.txt does not list: the image's base %s must have it, or the build must not need it", f, rf.base)
		}
	}
}
