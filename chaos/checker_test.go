package chaos

import (
	"testing"
	"time"
)

// TestCommitsPastUnhandled: the rule of the "commits past unhandled" check
// on a made-up history. A commit answered at `at` to a request sent at
// `sent` is a violation when a record below it was handled after `at`,
// unsure when it was handled between the two, and nothing when it was
// handled before the request.
func TestCommitsPastUnhandled(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	acks := map[int32][]ack{0: {{partition: 0, offset: 0}, {partition: 0, offset: 1}, {partition: 0, offset: 2}}}
	for _, c := range []struct {
		name        string
		handled     map[int64]time.Time // offset → first handled; absent: never
		commits     []commitObs
		bad, unsure int
	}{
		{"handled before the request", map[int64]time.Time{0: ms(0), 1: ms(10), 2: ms(20)},
			[]commitObs{{sent: ms(30), at: ms(40), offset: 3}}, 0, 0},
		{"handled inside the window", map[int64]time.Time{0: ms(0), 1: ms(100), 2: ms(20)},
			[]commitObs{{sent: ms(30), at: ms(2000), offset: 3}}, 0, 1},
		{"handled after the answer", map[int64]time.Time{0: ms(0), 1: ms(3000), 2: ms(20)},
			[]commitObs{{sent: ms(30), at: ms(40), offset: 3}}, 1, 0},
		{"never handled", map[int64]time.Time{0: ms(0), 2: ms(20)},
			[]commitObs{{sent: ms(30), at: ms(40), offset: 2}}, 1, 0},
		{"below the commit only", map[int64]time.Time{0: ms(0), 1: ms(10), 2: ms(3000)},
			[]commitObs{{sent: ms(30), at: ms(40), offset: 2}}, 0, 0},
		{"one violation seen by many polls counts once", map[int64]time.Time{0: ms(0), 1: ms(3000)},
			[]commitObs{{sent: ms(30), at: ms(40)}, {sent: ms(90), at: ms(100)}, {sent: ms(3100), at: ms(3110)}}, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := &env{t: t}
			for _, o := range c.commits {
				if o.offset == 0 {
					o.offset = 2
				}
				e.commits = append(e.commits, o)
			}
			bad, unsure := e.commitsPastUnhandled(acks, func(_ int32, o int64) (time.Time, bool) {
				h, ok := c.handled[o]
				return h, ok
			})
			if bad != c.bad || unsure != c.unsure {
				t.Errorf("bad %d, unsure %d; want %d, %d", bad, unsure, c.bad, c.unsure)
			}
		})
	}
}
