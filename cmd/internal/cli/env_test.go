package cli

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

// TestParseEnvPrecedence: a flag on the command line wins over its
// environment variable, which wins over the default; a bad variable is a
// usage error naming the variable and the flag, not its value.
func TestParseEnvPrecedence(t *testing.T) {
	EnvPrefix = "KEYSHARE"
	t.Cleanup(func() { EnvPrefix = "" })
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		ttl     time.Duration
		inFl    int
		wantErr string
	}{
		{"defaults", nil, nil, 10 * time.Second, 1000, ""},
		{"env over default", nil, map[string]string{"KEYSHARE_TTL": "3s", "KEYSHARE_MAX_IN_FLIGHT": "7"}, 3 * time.Second, 7, ""},
		{"flag over env", []string{"--ttl", "5s"}, map[string]string{"KEYSHARE_TTL": "3s"}, 5 * time.Second, 1000, ""},
		{"other prefix ignored", nil, map[string]string{"OTHER_TTL": "3s", "TTL": "4s"}, 10 * time.Second, 1000, ""},
		{"bad env", nil, map[string]string{"KEYSHARE_MAX_IN_FLIGHT": "lots"}, 0, 0, "$KEYSHARE_MAX_IN_FLIGHT (for --max-in-flight): want a whole number"},
		{"bad env behind a flag", []string{"--max-in-flight", "9"}, map[string]string{"KEYSHARE_MAX_IN_FLIGHT": "lots"}, 10 * time.Second, 9, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("member", flag.ContinueOnError)
			ttl := fs.Duration("ttl", 10*time.Second, "")
			inFl := fs.Int("max-in-flight", 1000, "")
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := setFromEnv(fs, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if tc.wantErr != "" {
				var ue usageError
				if err == nil || !errors.As(err, &ue) || err.Error() != tc.wantErr {
					t.Fatalf("err %v, want usage error %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "lots") {
					t.Fatalf("err %q repeats the value", err)
				}
				return
			}
			if err != nil || *ttl != tc.ttl || *inFl != tc.inFl {
				t.Fatalf("ttl %s, max-in-flight %d, err %v; want %s, %d", *ttl, *inFl, err, tc.ttl, tc.inFl)
			}
		})
	}
}

func TestEnvName(t *testing.T) {
	EnvPrefix = "KEYSHARE"
	t.Cleanup(func() { EnvPrefix = "" })
	for flag, want := range map[string]string{"ttl": "KEYSHARE_TTL", "max-in-flight": "KEYSHARE_MAX_IN_FLIGHT", "X": "KEYSHARE_X", "etcd-cacert": "KEYSHARE_ETCD_CACERT"} {
		if got := EnvName(flag); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", flag, got, want)
		}
	}
}

// TestParseErrorsNameTheFlag: the flag package's errors come back as one
// line naming the flag as users write it and what it wants.
func TestParseErrorsNameTheFlag(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--ttl", "5"}, `--ttl "5": want a duration with its unit, such as 500ms, 10s or 1m30s`},
		{[]string{"--max-in-flight", "many"}, `--max-in-flight "many": want a whole number`},
		{[]string{"--gain", "x"}, `--gain "x": want a number`},
		{[]string{"--json=maybe"}, `--json "maybe": want true or false`},
		{[]string{"--bogus"}, `unknown flag --bogus: run 'keyshare member -h' for the flags`},
		{[]string{"--ttl"}, `--ttl needs a value`},
		{[]string{"extra"}, `unexpected argument "extra"`},
	}
	Program = "keyshare"
	t.Cleanup(func() { Program = "" })
	for _, tc := range cases {
		fs := flag.NewFlagSet("member", flag.ContinueOnError)
		fs.Duration("ttl", time.Second, "")
		fs.Int("max-in-flight", 1, "")
		fs.Float64("gain", 1, "")
		fs.Bool("json", false, "")
		err := Parse(fs, tc.args)
		var ue usageError
		if !errors.As(err, &ue) || err.Error() != tc.want {
			t.Errorf("Parse(%q) = %v, want usage error %q", tc.args, err, tc.want)
		}
	}
}
