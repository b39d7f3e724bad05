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
		calls int       // handler calls waiting
		since time.Time // when calls last rose from 0
		last  string    // the last failure, escaped
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

// leave counts a call that stopped waiting: the endpoint answered, or the
// call's context ended.
func (t *trouble) leave() {
	t.mu.Lock()
	t.mu.calls--
	last := t.mu.calls == 0
	since := t.mu.since
	t.mu.Unlock()
	t.waiting.Dec()
	if last {
		t.log.Info("delivery endpoint answering again", "url", t.url, "after", time.Since(since).Round(time.Millisecond).String())
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
