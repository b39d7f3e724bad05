package deploy

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// image is the member image's file set assembled in a root directory: the
// base's files of runtime-files.txt and the binary where the Dockerfile
// copies it.
type image struct {
	root string
	bin  string // the binary's path inside root
	user string // UID:GID the image runs as
	env  []string
}

// assembleImage builds the image's file set in a temporary directory.
// The tests that run in it need root (chroot, files owned by the image's
// user); a test that is not root is skipped, saying so.
func assembleImage(t *testing.T) *image {
	t.Helper()
	requireDebian12(t)
	if os.Geteuid() != 0 {
		t.Skip("running keyshare in the image's file set needs root (chroot, and the image's uid 65532); go test ./deploy/ as root checks it")
	}
	for _, tool := range []string{"unshare", "mount", "chroot"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("running keyshare in the image's file set needs %s: %v", tool, err)
		}
	}
	stages, err := parseDockerfile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	rf := readRuntimeFiles(t)
	img := &image{root: t.TempDir(), bin: imageBinary(t, stages), user: rf.nonrootUser(t),
		env: append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/home/nonroot"}, rf.env...)}
	if err := os.Chmod(img.root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := rf.assemble(img.root); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(keyshareBin, filepath.Join(img.root, img.bin), 0o755); err != nil {
		t.Fatal(err)
	}
	// What every container gets from its runtime and the kubelet, not
	// from the image: mount points for /proc and /dev/null (command
	// mounts them), and /etc/hosts.
	for _, p := range []string{"proc", "dev"} {
		if err := os.MkdirAll(filepath.Join(img.root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, text := range fromTheRuntime {
		if err := os.WriteFile(filepath.Join(img.root, p), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return img
}

// fromTheRuntime are the files a container gets from its runtime and the
// kubelet, not from the image (relative to the root, with their text).
var fromTheRuntime = map[string]string{
	"dev/null":  "", // the mount point /dev/null is bound on
	"etc/hosts": "127.0.0.1\tlocalhost\n",
}

// command runs the image's entrypoint with args as the image's user,
// chrooted into the file set, in a mount namespace of its own that has
// /proc and /dev/null bound in, as a container runtime gives them: the
// mounts end with the process, so nothing is left to unmount. The
// process is the binary itself (each step execs the next), so a signal
// sent to it reaches keyshare.
func (img *image) command(env []string, args ...string) *exec.Cmd {
	const script = `root=$1; shift
mount --bind /proc "$root/proc" && mount --bind /dev/null "$root/dev/null" &&
exec chroot --userspec="$USERSPEC" "$root" "$@"`
	argv := append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh", img.root, img.bin}, args...)
	cmd := exec.Command("unshare", argv...)
	cmd.Env = append(append(append([]string(nil), img.env...), env...), "USERSPEC="+img.user)
	return cmd
}

// logSize logs the bytes of the file set and, with -v, their size as a
// gzip'd tar layer (how a registry stores and a node pulls them; it
// takes seconds, many more under the race detector).
func (img *image) logSize(t *testing.T) {
	t.Helper()
	var files, bytes int64
	counter := &countingWriter{}
	zw := gzip.NewWriter(counter)
	tw := tar.NewWriter(zw)
	err := filepath.WalkDir(img.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(img.root, p)
		if _, ok := fromTheRuntime[rel]; ok {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		files++
		bytes += info.Size()
		if !testing.Verbose() {
			return nil
		}
		return addToTar(tw, img.root, p, info)
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	bin, _ := os.Stat(keyshareBin)
	t.Logf("the image's file set: %d files, %d bytes (the binary %d)", files, bytes, bin.Size())
	if testing.Verbose() {
		t.Logf("as a gzip'd tar layer: %d bytes", counter.n)
	}
}

func addToTar(tw *tar.Writer, root, p string, info fs.FileInfo) error {
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: int64(info.Mode().Perm()), Size: info.Size(), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}

type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// TestImageRunsVersion: the binary starts in the image's file set as its
// user (a library or the loader missing fails here first). It logs the
// file set's size.
func TestImageRunsVersion(t *testing.T) {
	img := assembleImage(t)
	img.logSize(t)
	out, err := img.command(nil, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "keyshare v") {
		t.Fatalf("keyshare version in the image's file set: %v\n%s", err, out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
}
