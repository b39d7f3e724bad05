package loadgen

import "testing"

// TestProgressLine: a carriage return only on a terminal's bar; a file or
// a pipe gets whole lines.
func TestProgressLine(t *testing.T) {
	for _, c := range []struct {
		p                 Progress
		step, done, count int
		want              string
	}{
		{NoProgress, 1, 500, 10000, ""},
		{ProgressBar, 1, 500, 10000, "\r[#                   ] 500/10000"},
		{ProgressBar, 20, 10000, 10000, "\r[####################] 10000/10000"},
		{ProgressLines, 1, 500, 10000, "500/10000 records sent (5%)\n"},
		{ProgressLines, 20, 10000, 10000, "10000/10000 records sent (100%)\n"},
	} {
		if got := progressLine(c.p, c.step, c.done, c.count); got != c.want {
			t.Errorf("progressLine(%d, %d, %d, %d) = %q, want %q", c.p, c.step, c.done, c.count, got, c.want)
		}
	}
}
