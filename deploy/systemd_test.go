package deploy

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	unitFile = "systemd/keyshare-member.service"
	envFile  = "systemd/keyshare-member.env"
)

// unit is a systemd unit file: each section's settings, a key's values
// in order.
type unit map[string]map[string][]string

func readUnit(t *testing.T, file string) unit {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u, section := unit{}, ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]"):
			section = l[1 : len(l)-1]
			u[section] = map[string][]string{}
		case strings.Contains(l, "=") && section != "":
			k, v, _ := strings.Cut(l, "=")
			u[section][k] = append(u[section][k], v)
		default:
			t.Fatalf("%s:%d: %q: want [Section] or Key=value", file, n, l)
		}
	}
	return u
}

// one is a setting given once.
func (u unit) one(t *testing.T, section, key string) string {
	t.Helper()
	v := u[section][key]
	if len(v) != 1 {
		t.Fatalf("%s: [%s] %s set %d times; want once", unitFile, section, key, len(v))
	}
	return v[0]
}

// readEnvFile reads NAME=VALUE lines (systemd's EnvironmentFile form as
// the example uses it: no quotes, no continuations).
func readEnvFile(t *testing.T, file string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for i, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok || strings.ContainsAny(v, `"'\`) {
			t.Fatalf("%s:%d: %q: want NAME=value, unquoted", file, i+1, l)
		}
		env[k] = v
	}
	return env
}

var timeSpanPart = regexp.MustCompile(`^(\d+)(us|ms|s|sec|m|min|h|hr)?$`)

// parseTimeSpan reads a systemd time span ("55s", "1min 30s", "90").
func parseTimeSpan(s string) (time.Duration, error) {
	units := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "": time.Second, "s": time.Second,
		"sec": time.Second, "m": time.Minute, "min": time.Minute, "h": time.Hour, "hr": time.Hour}
	var d time.Duration
	for _, p := range strings.Fields(s) {
		m := timeSpanPart.FindStringSubmatch(p)
		if m == nil {
			return 0, fmt.Errorf("time span %q: want such as 55s or 1min 30s", s)
		}
		n, _ := strconv.Atoi(m[1])
		d += time.Duration(n) * units[m[2]]
	}
	return d, nil
}

// TestSystemdUnit holds the unit and its environment file to the
// member's settings and shutdown budget.
func TestSystemdUnit(t *testing.T) {
	u := readUnit(t, unitFile)
	env := readEnvFile(t, envFile)
	start := strings.Fields(u.one(t, "Service", "ExecStart"))
	if len(start) < 2 || start[1] != "member" {
		t.Fatalf("ExecStart %q: want keyshare member", start)
	}
	s, err := readMemberFlags(t).resolve(env, start[2:])
	if err != nil {
		t.Fatalf("%s: %v", envFile, err)
	}
	stop, err := parseTimeSpan(u.one(t, "Service", "TimeoutStopSec"))
	if err != nil {
		t.Fatal(err)
	}
	drain, ttl := s.duration(t, "drain-timeout"), s.duration(t, "ttl")
	if stop < drain+ttl+shutdownMargin {
		t.Errorf("TimeoutStopSec %v: below drain %v + TTL %v + %v; systemd kills a member mid-drain", stop, drain, ttl, shutdownMargin)
	}
	for key, want := range map[string]string{"KillSignal": "SIGTERM", "Restart": "on-failure", "DynamicUser": "yes",
		"NoNewPrivileges": "yes", "ProtectSystem": "strict"} {
		if got := u.one(t, "Service", key); got != want {
			t.Errorf("%s=%s; want %s", key, got, want)
		}
	}
	checkCredentials(t, u, s)
}

// checkCredentials: each secret file the member reads is one systemd
// hands it (LoadCredential), so the member's own user needs no access to
// the files in /etc/keyshare.
func checkCredentials(t *testing.T, u unit, s settings) {
	t.Helper()
	creds := map[string]bool{}
	for _, c := range u["Service"]["LoadCredential"] {
		name, _, _ := strings.Cut(c, ":")
		creds[name] = true
	}
	for _, flag := range secretFlags {
		file := s[flag]
		if file == "" {
			continue
		}
		if dir := path.Dir(file); !strings.HasPrefix(dir, "/run/credentials/keyshare-member@") || !creds[path.Base(file)] {
			t.Errorf("--%s %s is not a credential the unit loads (LoadCredential=%s:..., under /run/credentials/<unit>/)", flag, file, path.Base(file))
		}
	}
}

// TestSystemdUnitVerifies runs systemd-analyze verify on the unit (its
// binary and environment file pointed at the test's): unknown keys and
// values systemd cannot parse fail it.
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed: the unit's syntax is not verified here")
	}
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	envAbs, err := filepath.Abs(envFile)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "/usr/local/bin/keyshare", keyshareBin)
	text = strings.ReplaceAll(text, "/etc/keyshare/%i.env", envAbs)
	p := filepath.Join(t.TempDir(), "keyshare-member@orders.service")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", p).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unitFile, err, out)
	}
}
