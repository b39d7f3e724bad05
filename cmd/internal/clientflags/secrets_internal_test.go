package clientflags

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSecretFileOpenToOthers: a file others can open is warned about, and
// so is one its owner opened to the owner's group; a file the process reads
// only through a group it belongs to, as Kubernetes mounts a Secret with
// fsGroup (owned by root, group fsGroup, mode 0440), is not: the group is
// how it was given to this process.
func TestSecretFileOpenToOthers(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give a file another owner")
	}
	dir := t.TempDir()
	file := func(name string, mode os.FileMode, uid int) os.FileInfo {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, os.Getgid()); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	for _, tc := range []struct {
		name string
		mode os.FileMode
		uid  int // the file's owner; the test runs as root (0)
		want bool
	}{
		{"own-0600", 0o600, 0, false},
		{"own-0640", 0o640, 0, true},
		{"own-0644", 0o644, 0, true},
		{"others-0440-through-group", 0o440, 65532, false},
		{"others-0444", 0o444, 65532, true},
		{"others-0460-group-writes", 0o460, 65532, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := openToOthers(file(tc.name, tc.mode, tc.uid)); got != tc.want {
				t.Errorf("openToOthers(mode %#o, owner %d, group %d) = %v, want %v", tc.mode, tc.uid, os.Getgid(), got, tc.want)
			}
		})
	}
}
