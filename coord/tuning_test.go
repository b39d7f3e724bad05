package coord_test

import (
	"context"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/keyshare/keyshare/coord"
)

// TestTuningValidate: every impossible value is refused with the message
// that names it, its field, its default and the rule; the defaults and the
// edge values the rules allow pass; Config.Validate refuses the same values
// with the same message.
func TestTuningValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		set  func(*coord.Tuning)
		want string // "" means valid
	}{
		{"defaults", func(*coord.Tuning) {}, ""},
		{"ttl 1s", func(c *coord.Tuning) { c.SessionTTL = time.Second }, ""},
		{"ttl below 1s", func(c *coord.Tuning) { c.SessionTTL = 999 * time.Millisecond },
			"coord: session TTL 999ms must be at least 1s (Config.SessionTTL, default 10s)"},
		{"ttl zero", func(c *coord.Tuning) { c.SessionTTL = 0 },
			"coord: session TTL 0s must be at least 1s (Config.SessionTTL, default 10s)"},
		{"margin half the ttl", func(c *coord.Tuning) { c.DeadlineMargin = 5 * time.Second }, ""},
		{"margin negative", func(c *coord.Tuning) { c.DeadlineMargin = -time.Millisecond },
			"coord: deadline margin -1ms must be between 0 and half the session TTL 10s (Config.DeadlineMargin, default SessionTTL/10)"},
		{"margin past half the ttl", func(c *coord.Tuning) { c.DeadlineMargin = 5*time.Second + time.Millisecond },
			"coord: deadline margin 5.001s must be between 0 and half the session TTL 10s (Config.DeadlineMargin, default SessionTTL/10)"},
		{"grace off", func(c *coord.Tuning) { c.FailoverGrace = 0 }, ""},
		{"grace negative", func(c *coord.Tuning) { c.FailoverGrace = -time.Second },
			"coord: failover grace -1s must not be negative (Config.FailoverGrace, default 1s, 0 turns it off)"},
		{"drain an hour", func(c *coord.Tuning) { c.DrainTimeout = time.Hour }, ""},
		{"drain zero", func(c *coord.Tuning) { c.DrainTimeout = 0 },
			"coord: drain timeout 0s must be positive and at most 1h0m0s (Config.DrainTimeout, default 30s)"},
		{"drain past an hour", func(c *coord.Tuning) { c.DrainTimeout = time.Hour + time.Millisecond },
			"coord: drain timeout 1h0m0.001s must be positive and at most 1h0m0s (Config.DrainTimeout, default 30s)"},
		{"debounce zero", func(c *coord.Tuning) { c.RebalanceDebounce = 0 }, ""},
		{"debounce negative", func(c *coord.Tuning) { c.RebalanceDebounce = -time.Millisecond },
			"coord: rebalance debounce -1ms must not be negative (Config.RebalanceDebounce, default 200ms)"},
		{"refresh zero", func(c *coord.Tuning) { c.PartitionRefresh = 0 },
			"coord: partition refresh 0s must be positive (Config.PartitionRefresh, default 10s)"},
		{"txn ops 8", func(c *coord.Tuning) { c.MaxTxnOps = 8 }, ""},
		{"txn ops 7", func(c *coord.Tuning) { c.MaxTxnOps = 7 },
			"coord: max txn ops 7 must be at least 8: set it to the etcd server's --max-txn-ops (Config.MaxTxnOps, default 128)"},
		{"balance width", func(c *coord.Tuning) { c.Balance = coord.BalanceWidth }, ""},
		{"balance unknown", func(c *coord.Tuning) { c.Balance = "hash" },
			`coord: balance "hash": want "load" or "width" (Config.Balance, default "load")`},
		{"balance empty", func(c *coord.Tuning) { c.Balance = "" },
			`coord: balance "": want "load" or "width" (Config.Balance, default "load")`},
		{"report interval 100ms", func(c *coord.Tuning) { c.LoadReportInterval = 100 * time.Millisecond }, ""},
		{"report interval below 100ms", func(c *coord.Tuning) { c.LoadReportInterval = 99 * time.Millisecond },
			"coord: load report interval 99ms must be at least 100ms (Config.LoadReportInterval, default 5s)"},
		{"gain 1.05", func(c *coord.Tuning) { c.LoadMinGain = 1.05 }, ""},
		{"gain 100", func(c *coord.Tuning) { c.LoadMinGain = 100 }, ""},
		{"gain 1", func(c *coord.Tuning) { c.LoadMinGain = 1 },
			"coord: load minimum gain 1 must be from 1.05 to 100 (Config.LoadMinGain, default 1.25): below 1.05 measurement noise would move ranges back and forth"},
		{"gain 101", func(c *coord.Tuning) { c.LoadMinGain = 101 },
			"coord: load minimum gain 101 must be from 1.05 to 100 (Config.LoadMinGain, default 1.25): below 1.05 measurement noise would move ranges back and forth"},
		{"gain NaN", func(c *coord.Tuning) { c.LoadMinGain = math.NaN() },
			"coord: load minimum gain NaN must be from 1.05 to 100 (Config.LoadMinGain, default 1.25): below 1.05 measurement noise would move ranges back and forth"},
		{"busy zero", func(c *coord.Tuning) { c.LoadMinBusy = 0 }, ""},
		{"busy negative", func(c *coord.Tuning) { c.LoadMinBusy = -0.1 },
			"coord: load minimum busy -0.1 must be from 0 to 1e6 busy worker-seconds per second (Config.LoadMinBusy, default 0.5)"},
		{"busy NaN", func(c *coord.Tuning) { c.LoadMinBusy = math.NaN() },
			"coord: load minimum busy NaN must be from 0 to 1e6 busy worker-seconds per second (Config.LoadMinBusy, default 0.5)"},
		{"busy past 1e6", func(c *coord.Tuning) { c.LoadMinBusy = 1e6 + 1 },
			"coord: load minimum busy 1.000001e+06 must be from 0 to 1e6 busy worker-seconds per second (Config.LoadMinBusy, default 0.5)"},
		{"cooldown equal to the interval", func(c *coord.Tuning) { c.LoadCooldown = c.LoadReportInterval }, ""},
		{"cooldown below the interval", func(c *coord.Tuning) { c.LoadCooldown = time.Second },
			"coord: load cooldown 1s must be at least the load report interval 5s (Config.LoadCooldown, default 30s): the leader needs a report of the new ranges before it judges them"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tu := coord.DefaultTuning()
			c.set(&tu)
			check := func(what string, err error) {
				t.Helper()
				switch {
				case c.want == "" && err != nil:
					t.Errorf("%s: %v, want nil", what, err)
				case c.want != "" && (err == nil || err.Error() != c.want):
					t.Errorf("%s: %v\nwant %s", what, err, c.want)
				}
			}
			check("Tuning.Validate", tu.Validate())
			cfg := coord.DefaultConfig()
			cfg.Group, cfg.Topics = "g", []string{"t"}
			cfg.Partitions = func(context.Context, []string) (map[string]int32, error) { return nil, nil }
			cfg.Tuning = tu
			check("Config.Validate", cfg.Validate())
		})
	}
}

// TestConfigDoesNotShadowTuning: no field of Config has the name of a
// Tuning field, which would hide the embedded one and give the knob two
// names again.
func TestConfigDoesNotShadowTuning(t *testing.T) {
	t.Parallel()
	tt, ct := reflect.TypeFor[coord.Tuning](), reflect.TypeFor[coord.Config]()
	for i := range tt.NumField() {
		name := tt.Field(i).Name
		if f, ok := ct.FieldByName(name); !ok || len(f.Index) != 2 {
			t.Errorf("Config.%s is not Tuning's (index %v, found %v)", name, f.Index, ok)
		}
	}
}
