package main

import "testing"

func TestWithCommas(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{{0, "0"}, {999, "999"}, {1000, "1,000"}, {144664, "144,664"}, {1000000, "1,000,000"}, {-1234, "-1,234"}, {-123, "-123"}} {
		if got := withCommas(tc.n); got != tc.want {
			t.Errorf("withCommas(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
