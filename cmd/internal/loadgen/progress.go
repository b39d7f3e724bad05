package loadgen

import (
	"fmt"
	"strings"
)

// Progress is how a run shows its progress on stderr.
type Progress int

const (
	// NoProgress prints nothing.
	NoProgress Progress = iota
	// ProgressBar redraws one line with a carriage return: for a terminal.
	ProgressBar
	// ProgressLines prints a line at every 5 %: for a file or a pipe,
	// where a carriage return would pile every update onto one line.
	ProgressLines
)

// progressSteps is how many updates a run shows: one every 5 %.
const progressSteps = 20

// progressLine is what p prints when done of count records are sent and
// the run reaches step (of progressSteps), and "" for NoProgress.
func progressLine(p Progress, step, done, count int) string {
	switch p {
	case ProgressBar:
		return fmt.Sprintf("\r[%-*s] %d/%d", progressSteps, strings.Repeat("#", step), done, count)
	case ProgressLines:
		return fmt.Sprintf("%d/%d records sent (%d%%)\n", done, count, step*100/progressSteps)
	}
	return ""
}
