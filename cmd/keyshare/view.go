package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/keyshare/keyshare/ledger"
)

// liveView shows the demo as it runs: on a terminal, a screen redrawn every
// second with each partition's hash space as a bar coloured by owner; else
// one plain line per second.
type liveView struct {
	out    io.Writer
	tty    bool
	dir    string // where the members' record logs are
	start  time.Time
	read   map[string]int64 // bytes of each record log already counted
	lines  map[string]int64 // records handled per member
	rate   map[string]float64
	last   time.Time
	events []string
	note   func() string // a line about the demo's endpoint, if set
	// shared is the last line shown per shared partition (sharedLines),
	// so a layout is told once, and again when it changes.
	shared map[string]string
}

func newLiveView(dir string) *liveView {
	tty := false
	if fi, err := os.Stdout.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb" {
		tty = true
	}
	return &liveView{out: os.Stdout, tty: tty, dir: dir, start: time.Now(), read: map[string]int64{}, lines: map[string]int64{}, rate: map[string]float64{}, shared: map[string]string{}}
}

// event reports something that happened (a member started or was killed).
func (v *liveView) event(format string, a ...any) {
	line := stamp() + "  " + fmt.Sprintf(format, a...)
	if !v.tty {
		fmt.Fprintln(v.out, line)
		return
	}
	v.events = append(v.events, line)
	if len(v.events) > 8 {
		v.events = v.events[len(v.events)-8:]
	}
}

// count reads what the record logs gained since the last call.
func (v *liveView) count() {
	now := time.Now()
	files, _ := filepath.Glob(filepath.Join(v.dir, "*.jsonl"))
	for _, f := range files {
		id := strings.TrimSuffix(filepath.Base(f), ".jsonl")
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		if _, err := fh.Seek(v.read[id], io.SeekStart); err == nil {
			b, _ := io.ReadAll(fh)
			// Count whole lines only; a partial last line is read next time.
			if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
				n := int64(bytes.Count(b[:i+1], []byte{'\n'}))
				v.read[id] += int64(i + 1)
				if !v.last.IsZero() {
					v.rate[id] = float64(n) / now.Sub(v.last).Seconds()
				}
				v.lines[id] += n
			} else {
				v.rate[id] = 0
			}
		}
		fh.Close()
	}
	v.last = now
}

// ownerColours are ANSI 256-colour codes, one per member in id order.
var ownerColours = []int{39, 208, 70, 170, 220, 45, 203, 141}

func (v *liveView) colour(members []string, id string) string {
	i := sort.SearchStrings(members, id)
	if i >= len(members) || members[i] != id {
		return "\033[37m"
	}
	return fmt.Sprintf("\033[38;5;%dm", ownerColours[i%len(ownerColours)])
}

// frame shows the group's state.
func (v *liveView) frame(st *groupStatus, end, committed int64) {
	v.count()
	v.tellShared(st)
	var total int64
	var rate float64
	for id, n := range v.lines {
		total += n
		rate += v.rate[id]
	}
	if !v.tty {
		fmt.Fprintf(v.out, "%s  members %d  leader %-3s  gen %-3d  end %6d  committed %6d  lag %6d  handled %6d (%4.0f/s)  %s\n",
			stamp(), len(st.Members), name(st.Leader), st.Generation, end, committed, end-committed, total, rate, owners(st))
		if v.note != nil {
			fmt.Fprintf(v.out, "%s  %s\n", stamp(), v.note())
		}
		return
	}
	var ids []string
	for id := range v.lines {
		ids = append(ids, id)
	}
	for _, m := range st.Members {
		if _, ok := v.lines[m.ID]; !ok {
			ids = append(ids, m.ID)
		}
	}
	sort.Strings(ids)
	live := map[string]bool{}
	for _, m := range st.Members {
		live[m.ID] = true
	}
	var b strings.Builder
	b.WriteString("\033[H\033[2J")
	fmt.Fprintf(&b, "keyshare demo — %s elapsed   leader %s   generation %d\n\n", time.Since(v.start).Round(time.Second), name(st.Leader), st.Generation)
	fmt.Fprintf(&b, "%-6s %-8s %10s %8s\n", "MEMBER", "STATE", "HANDLED", "REC/S")
	for _, id := range ids {
		state := "gone"
		if live[id] {
			state = "live"
			if id == st.Leader {
				state = "leader"
			}
		}
		fmt.Fprintf(&b, "%s%-6s\033[0m %-8s %10d %8.0f\n", v.colour(ids, id), name(id), state, v.lines[id], v.rate[id])
	}
	fmt.Fprintf(&b, "%-6s %-8s %10d %8.0f\n", "all", "", total, rate)
	if v.note != nil {
		fmt.Fprintf(&b, "%s\n", v.note())
	}
	b.WriteString("\n")
	const width = 64
	for _, p := range st.Partitions {
		fmt.Fprintf(&b, "%-16s ", fmt.Sprintf("%s/%d", name(p.Topic), p.Partition))
		for i := range width {
			h := (uint64(i)*2 + 1) * ledger.HashSpace / (2 * width)
			owner, state := "", ""
			for _, r := range p.Ranges {
				if h >= r.Lo && h < r.Hi {
					owner, state = r.Owner, r.State
				}
			}
			ch := "█"
			if state != "active" {
				ch = "▒" // being handed over
			}
			b.WriteString(v.colour(ids, owner) + ch)
		}
		fmt.Fprintf(&b, "\033[0m  committed %s  end %s  lag %s\n", opt(p.Committed), opt(p.End), opt(p.Lag))
	}
	fmt.Fprintf(&b, "\n█ owned  ▒ being handed over   end %d  committed %d  lag %d\n\n", end, committed, end-committed)
	for _, e := range v.events {
		b.WriteString(e + "\n")
	}
	fmt.Fprint(v.out, b.String())
}

// tellShared reports, as an event, each partition whose ranges several
// members own, with each owner's ranges: the thing keyshare adds to Kafka,
// told in words as well as in the terminal's bars. A layout is told when
// it first appears and when it changes.
func (v *liveView) tellShared(st *groupStatus) {
	now := map[string]string{}
	for _, p := range st.Partitions {
		owners := map[string]bool{}
		var parts []string
		for _, r := range p.Ranges {
			owners[r.Owner] = true
			parts = append(parts, fmt.Sprintf("%s [%d,%d) (%.0f%%)", name(r.Owner), r.Lo, r.Hi, 100*float64(r.Hi-r.Lo)/float64(ledger.HashSpace)))
		}
		if len(owners) < 2 {
			continue
		}
		tp := fmt.Sprintf("%s/%d", name(p.Topic), p.Partition)
		now[tp] = fmt.Sprintf("partition %s is shared: %s", tp, strings.Join(parts, ", "))
	}
	for tp, line := range now {
		if v.shared[tp] != line {
			v.event("%s", line)
		}
	}
	v.shared = now
}
