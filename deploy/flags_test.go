package deploy

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// memberFlags are the settings of `keyshare member`, read from the help
// of the binary the tests built: each flag's default, and the environment
// variables it reads (KEYSHARE_ and the flag's name in upper case with -
// as _, as the help's last lines say, and the variables the help names).
type memberFlags struct {
	defaults  map[string]string // flag name → default ("" when none shown)
	variables map[string]bool   // every KEYSHARE_* variable the member reads
}

var (
	helpOnce   sync.Once
	helpFlags  *memberFlags
	helpFailed error
)

// readMemberFlags parses `keyshare member -h`, once per test binary.
func readMemberFlags(t *testing.T) *memberFlags {
	t.Helper()
	helpOnce.Do(func() {
		out, err := exec.Command(keyshareBin, "member", "-h").CombinedOutput()
		if err != nil {
			helpFailed = fmt.Errorf("keyshare member -h: %w\n%s", err, out)
			return
		}
		helpFlags, helpFailed = parseMemberHelp(string(out))
	})
	if helpFailed != nil {
		t.Fatal(helpFailed)
	}
	return helpFlags
}

var (
	flagLine    = regexp.MustCompile(`^  -([A-Za-z][\w-]*)(?: \w+)?$`)
	defaultText = regexp.MustCompile(`\(default "?([^")]*)"?\)$`)
	namedVar    = regexp.MustCompile(`\$(KEYSHARE_[A-Z_]+)`)
)

// envMappingLine is the help's statement of how variables map to flags;
// the parser relies on it, so a help without it fails the tests.
const envMappingLine = "--FLAG-NAME by $KEYSHARE_FLAG_NAME"

func parseMemberHelp(help string) (*memberFlags, error) {
	if !strings.Contains(help, envMappingLine) {
		return nil, fmt.Errorf("keyshare member -h no longer says %q: how do variables map to flags?", envMappingLine)
	}
	f := &memberFlags{defaults: map[string]string{}, variables: map[string]bool{}}
	cur := ""
	for _, l := range strings.Split(help, "\n") {
		if m := flagLine.FindStringSubmatch(l); m != nil {
			cur = m[1]
			f.defaults[cur] = ""
			f.variables[variableOf(cur)] = true
			continue
		}
		if cur != "" && strings.HasPrefix(l, "    \t") {
			if m := defaultText.FindStringSubmatch(l); m != nil {
				f.defaults[cur] = m[1]
			}
		}
		for _, m := range namedVar.FindAllStringSubmatch(l, -1) {
			if m[1] != "KEYSHARE_FLAG_NAME" { // the help's placeholder
				f.variables[m[1]] = true
			}
		}
	}
	if len(f.defaults) < 20 {
		return nil, fmt.Errorf("read only %d flags from keyshare member -h:\n%s", len(f.defaults), help)
	}
	return f, nil
}

// variableOf is the environment variable of a flag.
func variableOf(flag string) string {
	return "KEYSHARE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// flagOf is the flag a variable sets, "" for none (or the etcd password,
// which only a variable or a file gives).
func (f *memberFlags) flagOf(variable string) string {
	for name := range f.defaults {
		if variableOf(name) == variable {
			return name
		}
	}
	return ""
}

// settings is what a member runs with: flag name → value, from the
// defaults, then the environment, then the command line.
type settings map[string]string

// resolve applies env (variable → value) and args (flags after the
// subcommand) over the defaults; it fails on a variable or flag the
// member does not have.
func (f *memberFlags) resolve(env map[string]string, args []string) (settings, error) {
	s := settings{}
	for k, v := range f.defaults {
		s[k] = v
	}
	for k, v := range env {
		if !f.variables[k] {
			return nil, fmt.Errorf("%s is not a setting of keyshare member (keyshare member -h)", k)
		}
		if flag := f.flagOf(k); flag != "" {
			s[flag] = v
		}
	}
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !strings.HasPrefix(args[i], "-") {
			return nil, fmt.Errorf("argument %q: want --flag value", args[i])
		}
		if _, ok := f.defaults[name]; !ok {
			return nil, fmt.Errorf("--%s is not a flag of keyshare member (keyshare member -h)", name)
		}
		if !hasValue && i+1 < len(args) {
			i++
			value = args[i]
		}
		s[name] = value
	}
	return s, nil
}

// duration reads a duration setting.
func (s settings) duration(t *testing.T, flag string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s[flag])
	if err != nil {
		t.Fatalf("--%s %q: %v", flag, s[flag], err)
	}
	return d
}

// TestMemberHelpParses checks the parser against flags whose defaults
// the shutdown budget depends on.
func TestMemberHelpParses(t *testing.T) {
	f := readMemberFlags(t)
	for flag, want := range map[string]string{"ttl": "10s", "drain-timeout": "30s", "prefix": "/keyshare"} {
		if got := f.defaults[flag]; got != want {
			t.Errorf("--%s default %q; want %q", flag, got, want)
		}
	}
	for _, v := range []string{"KEYSHARE_X", "KEYSHARE_ETCD_PASSWORD", "KEYSHARE_DELIVER_TOKEN_FILE"} {
		if !f.variables[v] {
			t.Errorf("%s not read from keyshare member -h", v)
		}
	}
	if f.variables["KEYSHARE_NO_SUCH_FLAG"] {
		t.Error("KEYSHARE_NO_SUCH_FLAG accepted")
	}
}
