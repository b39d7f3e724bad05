package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// keyshare status --watch: a screen redrawn in place every second that
// outlives etcd's outages, or one JSON object a line. Only a terminal is
// redrawn: on a file or a pipe, escapes would be noise, so each frame
// follows the last after a ruler line.

// watchStatus reads the group and shows it on out every interval until ctx
// ends. When etcd cannot be read it keeps the last status under a banner
// saying since when, and goes on trying; an unknown group ends it (exit 1).
func (c *statusCommand) watchStatus(ctx context.Context, out io.Writer, every time.Duration, read func() (*groupStatus, error), klog *kafkaLog) error {
	var last *groupStatus
	var down *etcdOutage
	marks := markClock{}
	for {
		st, err := read()
		switch {
		case errors.Is(err, errUnknownGroup):
			return err
		case err != nil:
			if ctx.Err() != nil {
				return nil
			}
			if down == nil {
				down = &etcdOutage{Since: time.Now()}
			}
			down.Error = err.Error()
			if last == nil {
				last = &groupStatus{Group: c.group, Prefix: c.prefix, At: down.Since, State: "Unknown", StateReason: "etcd not read yet"}
			}
			cp := *last
			cp.EtcdDown = down
			st = &cp
		default:
			down = nil
			marks.stamp(st)
			lagTrend(last, st)
			last = st
		}
		if c.asJSON {
			if err := printStatusJSON(out, st, false); err != nil {
				return err
			}
		} else {
			var b bytes.Buffer
			printStatus(&b, st)
			if line, at := klog.last(); line != "" {
				fmt.Fprintf(&b, "\nkafka client, %s ago: %s\n", ago(time.Now(), &at), esc(line))
			}
			if c.screen {
				redraw(out, b.Bytes())
			} else {
				_, _ = fmt.Fprintf(out, "%s\n%s", watchRuler, b.Bytes())
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

// watchRuler is the line before each frame of --watch on an output that is
// not a terminal, where frames follow one another rather than overwrite.
const watchRuler = "-------- keyshare status --------"

// redraw writes frame over the previous one: cursor home, each line
// clearing what is left of the old one, and the rest of the screen
// cleared, so the screen does not flash blank between frames.
func redraw(out io.Writer, frame []byte) {
	var b bytes.Buffer
	b.WriteString("\033[H")
	for line := range strings.Lines(string(frame)) {
		b.WriteString(strings.TrimSuffix(line, "\n"))
		b.WriteString("\033[K\n")
	}
	b.WriteString("\033[J")
	_, _ = out.Write(b.Bytes())
}

// markClock remembers each range's watermark across refreshes, to say
// since when it has not moved. A value seen at the first refresh has an
// unknown start; one that changed is dated from the refresh that saw it.
type markClock map[rangeKey]markSeen

type markSeen struct {
	watermark int64
	since     time.Time // zero: unknown
}

// stamp sets WatermarkSince of st's ranges that have none from their
// owner, and records what st shows. Ranges no longer in st are forgotten.
func (mc markClock) stamp(st *groupStatus) {
	seen := map[rangeKey]bool{}
	for i := range st.Partitions {
		p := &st.Partitions[i]
		for j := range p.Ranges {
			r := &p.Ranges[j]
			if r.Watermark == nil {
				continue
			}
			k := rangeKey{p.Topic, p.Partition, r.Lo}
			seen[k] = true
			prev, ok := mc[k]
			switch {
			case !ok:
				mc[k] = markSeen{watermark: *r.Watermark}
			case prev.watermark != *r.Watermark:
				mc[k] = markSeen{watermark: *r.Watermark, since: st.At}
			}
			if s := mc[k].since; r.WatermarkSince == nil && !s.IsZero() {
				r.WatermarkSince = &s
			}
		}
	}
	for k := range mc {
		if !seen[k] {
			delete(mc, k)
		}
	}
}

// kafkaLog takes librdkafka's log lines off the terminal: with echo set
// (a one-shot status) each goes to it, prefixed, after the output; else it
// keeps the last one for the watch screen to show in its place.
type kafkaLog struct {
	echo io.Writer
	mu   sync.Mutex
	line string
	at   time.Time
}

// drain reads the client's log channel until the client closes it.
func (l *kafkaLog) drain(logs chan kafka.LogEvent) {
	for e := range logs {
		line := fmt.Sprintf("%s: %s", e.Tag, e.Message)
		l.mu.Lock()
		l.line, l.at = line, e.Timestamp
		if l.echo != nil {
			fmt.Fprintf(l.echo, "kafka client: %s\n", esc(line))
		}
		l.mu.Unlock()
	}
}

func (l *kafkaLog) last() (string, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.line, l.at
}

// stdoutIsTerminal: stdout is a character device (a terminal, as far as
// the standard library can tell) and $TERM does not say it draws nothing.
func stdoutIsTerminal() bool {
	fi, err := os.Stdout.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb"
}
