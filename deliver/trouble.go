package deliver

import (
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/keyshare/keyshare/internal/textsafe"
)

// trouble follows the handler calls waiting for the endpoint to answer:
// the endpoint is in trouble while any is. It logs when that starts and
// ends, not per request.
type trouble struct {
	log     hclog.Logger
	url     string
	waiting prometheus.Gauge

	mu struct {
		sync.Mutex
		calls    int       // handler calls waiting
		since    time.Time // when calls last rose from 0
		last     string    // the last failure, escaped
		answered bool      // a waiting call got the endpoint's answer since
	}
}

// enter counts a call that found the endpoint in trouble.
func (t *trouble) enter(err error) {
	msg := textsafe.Cut(err.Error(), maxErrorBody)
	t.mu.Lock()
	t.mu.calls++
	first := t.mu.calls == 1
	if first {
		t.mu.since = time.Now()
	}
	t.mu.last = msg
	t.mu.Unlock()
	t.waiting.Inc()
	if first {
		t.log.Warn("delivery endpoint not answering; its records wait and are sent again (none dead-lettered)", "url", t.url, "error", msg)
	} else {
		t.log.Debug("delivery endpoint not answering", "url", t.url, "error", msg)
	}
}

// note records a waiting call's later failure.
func (t *trouble) note(err error) {
	msg := textsafe.Cut(err.Error(), maxErrorBody)
	t.mu.Lock()
	t.mu.last = msg
	t.mu.Unlock()
	t.log.Debug("delivery endpoint not answering", "url", t.url, "error", msg)
}

// leave counts a call that stopped waiting: answered says whether the
// endpoint answered it, or whether its context ended first (the member
// stopped working on its records). The endpoint is said to answer again
// only when some waiting call got its answer: a call cancelled is no
// answer.
func (t *trouble) leave(answered bool) {
	t.mu.Lock()
	t.mu.calls--
	t.mu.answered = t.mu.answered || answered
	last := t.mu.calls == 0
	recovered := t.mu.answered
	since := t.mu.since
	if last {
		t.mu.answered = false
	}
	t.mu.Unlock()
	t.waiting.Dec()
	switch {
	case last && recovered:
		t.log.Info("delivery endpoint answering again", "url", t.url, "after", time.Since(since).Round(time.Millisecond).String())
	case last:
		t.log.Info("no call waits for the delivery endpoint any more; it has not answered", "url", t.url,
			"for", time.Since(since).Round(time.Millisecond).String())
	}
}

func (t *trouble) err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.calls == 0 {
		return nil
	}
	return fmt.Errorf("delivery endpoint %s not answering for %s (%d handler calls waiting): %s",
		t.url, time.Since(t.mu.since).Round(time.Second), t.mu.calls, t.mu.last)
}
