package schema

import "testing"

// TestNotableHotKey: a hot key is shown with 1% of its range's busy time,
// or a tenth of a worker however busy the range.
func TestNotableHotKey(t *testing.T) {
	for _, tc := range []struct {
		key, rng float64
		want     bool
	}{
		{0.5, 1, true},
		{0.01, 1, true},
		{0.009, 1, false},
		{0.0001, 0.001, true}, // 10% of a nearly idle range
		{0.0002, 0.01, true},
		{0.1, 200, true},   // one key of a range 200 workers keep busy
		{0.05, 200, false}, // a record's worth in that range
	} {
		if got := NotableHotKey(tc.key, tc.rng); got != tc.want {
			t.Errorf("NotableHotKey(%v, %v) = %v, want %v", tc.key, tc.rng, got, tc.want)
		}
	}
}
