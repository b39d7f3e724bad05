package deliver

import (
	"net/http"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	want := map[int]outcome{
		0: outcomeTrouble, 200: outcomeDone, 202: outcomeDone, 204: outcomeDone,
		301: outcomeTrouble, 304: outcomeTrouble,
		400: outcomeRefused, 409: outcomeRefused, 413: outcomeRefused, 422: outcomeRefused,
		401: outcomeTrouble, 403: outcomeTrouble, 404: outcomeTrouble, 405: outcomeTrouble,
		408: outcomeTrouble, 429: outcomeTrouble,
		500: outcomeTrouble, 502: outcomeTrouble, 503: outcomeTrouble, 504: outcomeTrouble,
	}
	for status, o := range want {
		if got := classify(status); got != o {
			t.Errorf("classify(%d) = %s, want %s", status, got, o)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	limit := time.Minute
	for _, tc := range []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"3", 3 * time.Second, true},
		{"0", 0, true},
		{"86400", time.Minute, true},             // capped
		{"99999999999999999", time.Minute, true}, // no overflow
		{"-1", 0, false},
		{"soon", 0, false},
		{now.Add(10 * time.Second).Format(http.TimeFormat), 10 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{now.Add(time.Hour).Format(http.TimeFormat), time.Minute, true},
	} {
		got, ok := retryAfter(tc.v, now, limit)
		if got != tc.want || ok != tc.ok {
			t.Errorf("retryAfter(%q) = %s, %v; want %s, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}
