package membercmd

import (
	"reflect"
	"strings"
	"testing"

	"github.com/keyshare/keyshare/consumer"
)

// configFieldPaths lists consumer.Config's settings: its fields, Retry's as
// Retry.X and the embedded coord.Tuning's by their own names.
func configFieldPaths(t reflect.Type, prefix string) []string {
	var paths []string
	for f := range t.Fields() {
		switch {
		case f.Anonymous:
			paths = append(paths, configFieldPaths(f.Type, prefix)...)
		case f.Type.Kind() == reflect.Struct && f.Type.PkgPath() == t.PkgPath():
			paths = append(paths, configFieldPaths(f.Type, prefix+f.Name+".")...)
		default:
			paths = append(paths, prefix+f.Name)
		}
	}
	return paths
}

// TestConfigFlagsCoverConfig: every consumer.Config setting has a member
// flag in configFlags, or is one of the few set otherwise (noConfigFlag);
// every flag configFlags names is one the member registers.
func TestConfigFlagsCoverConfig(t *testing.T) {
	paths := configFieldPaths(reflect.TypeFor[consumer.Config](), "")
	if len(paths) < 30 {
		t.Fatalf("found only %d fields: %v", len(paths), paths)
	}
	seen := map[string]bool{}
	for _, p := range paths {
		seen[p] = true
		_, flagged := configFlags[p]
		_, other := noConfigFlag[p]
		if flagged == other {
			t.Errorf("consumer.Config field %s: want it in exactly one of configFlags (flagged %v) and noConfigFlag (%v)", p, flagged, other)
		}
	}
	fs := (&Command{}).flagSet()
	for field, flag := range configFlags {
		if !seen[field] {
			t.Errorf("configFlags names %s, which consumer.Config does not have", field)
		}
		if fs.Lookup(strings.TrimPrefix(flag, "--")) == nil {
			t.Errorf("configFlags maps %s to %s, which the member does not register", field, flag)
		}
	}
}

// TestMemberRefusesBadSettings: a bad value of any consumer.Config setting
// is a usage error naming its flag, found before any network, and naming
// no Go field. Every flag of configFlags that can be wrong is here.
func TestMemberRefusesBadSettings(t *testing.T) {
	cases := []struct {
		args []string
		want string // the error's start
	}{
		{[]string{"--group", "a/b"}, `--group "a/b" contains '/'`},
		{[]string{"--topic", "a/b"}, `topic "a/b" contains '/'`},
		{[]string{"--auto-offset-reset", "now"}, `--auto-offset-reset "now": want "earliest" or "latest"`},
		{[]string{"-X", "auto.offset.reset=latest"}, "Kafka setting auto.offset.reset=latest: use --auto-offset-reset instead"},
		{[]string{"--retention-loss", "ignore"}, `--retention-loss "ignore": want "report" or "halt"`},
		{[]string{"--batch-size", "5", "--max-in-flight", "20", "--concurrency", "1", "--batch-size", "30"}, "--batch-size 30 exceeds --max-in-flight 20"},
		{[]string{"--batch-size", "5", "--batch-wait", "-1s"}, "--batch-wait -1s must not be negative"},
		{[]string{"--concurrency", "0"}, "--concurrency 0 must be at least 1"},
		{[]string{"--max-in-flight", "-3"}, "--max-in-flight -3 must be at least --concurrency 16"},
		{[]string{"--max-in-flight-bytes", "0"}, "--max-in-flight-bytes 0 must be positive"},
		{[]string{"--max-queued-per-key", "-1"}, "--max-queued-per-key -1 must not be negative"},
		{[]string{"--flush-interval", "0s"}, "--flush-interval 0s must be positive"},
		{[]string{"--max-unflushed", "2"}, "--max-unflushed 2 must be at least --concurrency 16"},
		{[]string{"--flush-entry-bytes", "5"}, "--flush-entry-bytes 5 must be between 1 KiB and 1 MiB"},
		{[]string{"--etcd-timeout", "0s"}, "--etcd-timeout 0s must be positive"},
		{[]string{"--commit-interval", "0s"}, "--commit-interval 0s must be positive"},
		{[]string{"--max-attempts", "0"}, "--max-attempts 0 must be at least 1"},
		{[]string{"--retry-backoff", "-1s"}, "--retry-backoff -1s and --retry-max-backoff 5s: want 0 <= --retry-backoff <= --retry-max-backoff"},
		{[]string{"--retry-max-backoff", "1ms"}, "--retry-backoff 100ms and --retry-max-backoff 1ms"},
		{[]string{"--dlq", "a/b"}, `dead-letter topic "a/b" contains '/'`},
		{[]string{"--id", "a/b"}, `--id: member id "a/b" contains '/'`},
		{[]string{"--weight", "0"}, "--weight: weight 0 must be at least 1 (default 1)"},
		{[]string{"--weight", "2000000"}, "--weight: weight 2000000 is above the limit"},
		{[]string{"--prefix", "ks"}, `--prefix: prefix "ks" must start with '/' (default /keyshare)`},
		{[]string{"--start-timeout", "0s"}, "--start-timeout: start timeout 0s must be positive (default 10s)"},
		{[]string{"--stuck-timeout", "0s"}, "--stuck-timeout 0s must be positive"},
		{[]string{"--ttl", "500ms"}, "--ttl: session TTL 500ms must be at least 1s (default 10s)"},
		{[]string{"--ttl", "5"}, `--ttl "5": want a duration with its unit`},
		{[]string{"--deadline-margin", "6s"}, "--deadline-margin: deadline margin 6s must be between 0 and half the session TTL 10s"},
		{[]string{"--failover-grace", "-1s"}, "--failover-grace: failover grace -1s must not be negative"},
		{[]string{"--drain-timeout", "2h"}, "--drain-timeout: drain timeout 2h0m0s must be positive and at most 1h0m0s"},
		{[]string{"--rebalance-debounce", "-1s"}, "--rebalance-debounce: rebalance debounce -1s must not be negative"},
		{[]string{"--partition-refresh", "0s"}, "--partition-refresh: partition refresh 0s must be positive"},
		{[]string{"--max-txn-ops", "7"}, "--max-txn-ops 7: want at least 8"},
		{[]string{"--balance", "hash"}, `--balance "hash": want "load" or "width"`},
		{[]string{"--load-report-interval", "10ms"}, "--load-report-interval 10ms: want at least 100ms"},
		{[]string{"--load-min-gain", "1"}, "--load-min-gain: load minimum gain 1 must be from 1.05 to 100 (default 1.25)"},
		{[]string{"--load-min-busy", "-1"}, "--load-min-busy: load minimum busy -1 must be from 0 to 1e6"},
		{[]string{"--load-cooldown", "1s"}, "--load-cooldown: load cooldown 1s must be at least the load report interval 5s"},
		{[]string{"--log-level", "verbose"}, `--log-level "verbose": want one of trace, debug, info, warn, error, off`},
		{[]string{"--log-format", "logfmt"}, `--log-format "logfmt": want text or json`},
	}
	covered := map[string]bool{}
	for _, tc := range cases {
		args := append([]string{"--group", "g", "--topic", "t", "--deliver", "http://sink/"}, tc.args...)
		_, err := (&Command{}).parse(args)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error starting %q", tc.args, err, tc.want)
			continue
		}
		if m := configField.FindString(err.Error()); m != "" {
			t.Errorf("%v: %q names the Go field %s", tc.args, err, m)
		}
		covered[tc.args[len(tc.args)-2]] = true
	}
	// The settings that cannot be wrong: any string, or any value.
	for _, ok := range []string{"--metrics-addr"} {
		covered[ok] = true
	}
	for field, flag := range configFlags {
		if !covered[flag] && flag != "--topic" && flag != "--group" {
			t.Errorf("no case gives %s (%s) a bad value", flag, field)
		}
	}
}

// TestProductMemberDelivers: keyshare member (no lab) wants --deliver,
// and refuses each lab flag saying where it went.
func TestProductMemberDelivers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--group, at least one --topic and --deliver URL are required"},
		{[]string{"--group", "g", "--topic", "t"}, "--deliver URL is required"},
		{[]string{"--group", "g", "--topic", "t", "--work", "5ms"}, "--work is not a flag of keyshare member"},
		{[]string{"--group", "g", "--topic", "t", "--deliver", "http://sink/", "--fail-rate=0.1"}, "--fail-rate is not a flag of keyshare member"},
		{[]string{"--stall", "k:1s"}, "--stall is not a flag"},
		{[]string{"-record", "x"}, "--record is not a flag"},
		{[]string{"--audit", "x"}, "--audit is not a flag"},
	} {
		_, err := New(nil).parse(tc.args)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || (tc.args != nil && !strings.Contains(err.Error(), "keyshare-bench member")) {
			t.Errorf("%v: got %v, want an error starting %q that names keyshare-bench member", tc.args, err, tc.want)
		}
	}
	if _, err := New(nil).parse([]string{"--group", "g", "--topic", "t", "--deliver", "http://sink/"}); err != nil {
		t.Errorf("a member with --deliver: %v", err)
	}
}
