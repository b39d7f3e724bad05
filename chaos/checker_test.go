package chaos

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
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

// TestPreviousReleaseAttribution: the rolling-upgrade row excuses only what
// the previous release does. A duplicate counts as the previous release's
// when the member that first ran the record was on it at the time, and a
// failover when the range's old owner was; the same ids on this tree's
// build count in full.
func TestPreviousReleaseAttribution(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	// m1 runs the previous release until 1000 ms, then this tree's build.
	e := &env{t: t, runs: []memberRun{{id: "m1", from: ms(0), previous: true}, {id: "m2", from: ms(0)}, {id: "m1", from: ms(1000)}}}
	for _, c := range []struct {
		id   string
		at   int
		want bool
	}{{"m1", 500, true}, {"m1", 1500, false}, {"m2", 500, false}, {"m3", 500, false}} {
		if got := e.onPrevious(c.id, ms(c.at)); got != c.want {
			t.Errorf("onPrevious(%s, %d ms) = %v, want %v", c.id, c.at, got, c.want)
		}
	}

	line := func(member string, offset int64, start int) handledLine {
		return handledLine{Member: member, Offset: offset, Key: "k", Start: ms(start), Time: ms(start + 1)}
	}
	lines := []handledLine{
		line("m1", 0, 100),  // first run on the previous release,
		line("m1", 0, 200),  // again: the previous release's
		line("m1", 1, 1100), // first run on this tree's build,
		line("m2", 1, 1200), // again: counted against the row
		line("m2", 2, 1300),
		line("m1", 2, 1400), // first by m2 (this tree), again by m1: counted
	}
	perFault, byPrevious := duplicatesPerFault(lines, []time.Time{ms(50), ms(1050)}, e.onPrevious)
	if byPrevious != 1 || perFault[0] != 0 || perFault[1] != 2 {
		t.Errorf("per fault %v, by the previous release %d; want [0 2], 1", perFault, byPrevious)
	}

	// A range failing over from m1: excused while m1 ran the previous
	// release, not once it runs this tree's build.
	grantAt := func(at int, owner string) grant {
		return grant{at: ms(at), rec: schema.RangeRecord{Topic: topic, Lo: 0, Hi: ledger.HashSpace, Owner: owner}}
	}
	for _, c := range []struct {
		name     string
		lines    []handledLine
		excused  int
		from, to int
	}{
		{"old owner on the previous release", []handledLine{line("m1", 0, 100), line("m2", 1, 800)}, 1, 0, 700},
		{"old owner on this tree", []handledLine{line("m1", 0, 1100), line("m2", 1, 1800)}, 0, 1000, 1700},
	} {
		r := overlap([]grant{grantAt(c.from, "m1"), grantAt(c.to, "m2")}, nil, c.lines, e.onPrevious)
		if r.Failovers != 1 || r.FailoversByPrevious != c.excused {
			t.Errorf("%s: %+v, want 1 failover, %d by the previous release", c.name, r, c.excused)
		}
	}
}

// TestReplaceTable: the matrix's report replaces its table in
// docs/reliability.md and nothing around it, and the document as it is
// holds the table's head.
func TestReplaceTable(t *testing.T) {
	const head = "| a | b |\n|---|---|\n"
	doc := "# Title\n\nProse.\n\n" + head + "| 1 | 2 |\n| 3 | 4 |\n\nMore prose.\n| not | after a blank line |\n"
	got, err := replaceTable(doc, head, head+"| 5 | 6 |\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "# Title\n\nProse.\n\n" + head + "| 5 | 6 |\n\nMore prose.\n| not | after a blank line |\n"; got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if _, err := replaceTable("# Title\n", head, head); err == nil {
		t.Error("a document without the table: no error")
	}
	doc2, err := os.ReadFile("../docs/reliability.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc2), reportTableHead) {
		t.Errorf("docs/reliability.md lacks the matrix's table head %q: the long run could not write its figures", reportTableHead)
	}
}
