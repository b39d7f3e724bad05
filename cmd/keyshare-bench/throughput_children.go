package main

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// readerChildren is the reader processes of one row.
type readerChildren []*readerChild

func (children readerChildren) kill() {
	for _, ch := range children {
		_ = ch.cmd.Process.Kill()
	}
}

// awaitReady waits, at most a minute, until the reader is set up.
func (ch *readerChild) awaitReady() error {
	select {
	case <-ch.ready:
		return nil
	case err := <-ch.done:
		return fmt.Errorf("reader exited before it was ready: %v", err)
	case <-time.After(time.Minute):
		return errors.New("reader not ready within a minute")
	}
}

// startTogether waits until every reader is set up, then tells them all
// to start reading.
func (children readerChildren) startTogether() error {
	for _, ch := range children {
		if err := ch.awaitReady(); err != nil {
			return err
		}
	}
	for _, ch := range children {
		if _, err := io.WriteString(ch.stdin, "go\n"); err != nil {
			return err
		}
	}
	return nil
}

// waitHandled waits until the readers have handled n records between
// them, and returns each one's latest report.
func (children readerChildren) waitHandled(n int) ([]readerReport, error) {
	reports := make([]readerReport, len(children))
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var sum int64
		for i, ch := range children {
			select {
			case r := <-ch.latest:
				reports[i] = r
			case err := <-ch.done:
				return nil, fmt.Errorf("reader exited: %v", err)
			default:
			}
			sum += reports[i].Handled
		}
		if sum >= int64(n) {
			return reports, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d records handled in 10 minutes", sum, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readerTotals sums the readers' last reports: the first and last record
// handled (unix ns), CPU, librdkafka's CPU (-1 when a reader did not
// measure it) and allocations.
type readerTotals struct {
	first, last, cpu, rdk, allocs, bytes int64
}

// stop closes the readers' stdin, waits for them to exit and sums their
// last reports (reports holds each one's latest so far).
func (children readerChildren) stop(reports []readerReport) (readerTotals, error) {
	for _, ch := range children {
		ch.stdin.Close()
	}
	var t readerTotals
	for i, ch := range children {
		select {
		case err := <-ch.done:
			if err != nil {
				return t, fmt.Errorf("reader: %w", err)
			}
		case <-time.After(time.Minute):
			return t, errors.New("reader did not stop within a minute")
		}
		select {
		case r := <-ch.latest:
			reports[i] = r
		default:
		}
		t.add(reports[i])
	}
	return t, nil
}

func (t *readerTotals) add(r readerReport) {
	if r.Handled == 0 {
		return
	}
	if t.first == 0 || r.First < t.first {
		t.first = r.First
	}
	t.last = max(t.last, r.Last)
	t.cpu, t.allocs, t.bytes = t.cpu+r.CPUNanos, t.allocs+r.Allocs, t.bytes+r.AllocBytes
	if t.rdk >= 0 && r.RdkCPUNanos >= 0 {
		t.rdk += r.RdkCPUNanos
	} else {
		t.rdk = -1 // a reader that did not measure it: no sum
	}
}

// row is the totals per record of n records.
func (t readerTotals) row(n int) throughputRow {
	d := time.Duration(t.last - t.first)
	rdkMicros := -1.0
	if t.rdk >= 0 {
		rdkMicros = float64(t.rdk) / 1e3 / float64(n)
	}
	return throughputRow{
		rate:       float64(n) / d.Seconds(),
		cpuMicros:  float64(t.cpu) / 1e3 / float64(n),
		rdkMicros:  rdkMicros,
		allocs:     float64(t.allocs) / float64(n),
		allocBytes: float64(t.bytes) / float64(n),
	}
}
