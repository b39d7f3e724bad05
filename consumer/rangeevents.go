package consumer

import (
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/ledger"
)

// rangeEventLines is how many ranges of one kind a reconcile logs a line
// each for. A member that leaves, joins or takes over a crashed one at
// P = 4,096 acquires, drains or drops thousands of ranges at once; a line
// per range buried everything else in the log (three lines per moved range
// per leave) and cost the member CPU while it moved them.
const rangeEventLines = 3

// rangeEvent is one lifecycle event of a range.
type rangeEvent struct {
	tp   tp
	rng  ledger.HashRange
	args []any // the event's own fields (watermark, to)
}

// rangeEvents gathers the lifecycle events of one reconcile, logged
// together at its end: a line each for a few ranges of a kind, one line
// with a count and the first few for more (with a line each at debug).
type rangeEvents struct {
	acquired, revoked, dropped []rangeEvent
}

func (e *rangeEvents) log(log hclog.Logger) {
	logRangeEvents(log, "range acquired", "ranges acquired", e.acquired)
	logRangeEvents(log, "range revoked; draining", "ranges revoked; draining", e.revoked)
	logRangeEvents(log, "range dropped", "ranges dropped", e.dropped)
}

func logRangeEvents(log hclog.Logger, one, many string, evs []rangeEvent) {
	each := func(level hclog.Level) {
		for _, ev := range evs {
			log.Log(level, one, append([]any{"topic", ev.tp.Topic, "partition", ev.tp.Partition, "range", ev.rng.String()}, ev.args...)...)
		}
	}
	if len(evs) <= rangeEventLines {
		each(hclog.Info)
		return
	}
	log.Info(many, "count", len(evs), "ranges", textsafe.FirstFew(evs, ", ", func(ev rangeEvent) string {
		return fmt.Sprintf("%s/%d %s", ev.tp.Topic, ev.tp.Partition, ev.rng)
	}))
	if log.IsDebug() {
		each(hclog.Debug)
	}
}
