package deliver

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// lockedLog is a logger's output, safe to read while it is written.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestNoRecoveryLoggedWithoutAnswer: a handler call waiting for an
// endpoint that is down ends with its context (the member leaving): the
// log says the endpoint stopped answering, and never that it answers
// again, as it did not.
func TestNoRecoveryLoggedWithoutAnswer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // connections to it are refused
	out := &lockedLog{}
	ep, err := New(Config{URL: "http://" + addr + "/", Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
		Logger: hclog.New(&hclog.LoggerOptions{Output: out, Level: hclog.Info})})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ep.Handler()(ctx, message("orders", 0, 1, "k")) }()
	for ep.Ready() == nil {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	log := out.String()
	if !strings.Contains(log, "delivery endpoint not answering") || strings.Contains(log, "answering again") {
		t.Errorf("log:\n%s\nwant the endpoint not answering, and no line saying it answers again", log)
	}
}

// TestRecoveryLoggedOnAnswer: an endpoint that answers after trouble is
// logged as answering again.
func TestRecoveryLoggedOnAnswer(t *testing.T) {
	t.Parallel()
	out := &lockedLog{}
	var mu sync.Mutex
	n := 0
	ep, _ := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if n++; n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}, func(c *Config) { c.Logger = hclog.New(&hclog.LoggerOptions{Output: out, Level: hclog.Info}) })
	if err := ep.Handler()(t.Context(), message("orders", 0, 1, "k")); err != nil {
		t.Fatal(err)
	}
	if log := out.String(); !strings.Contains(log, "delivery endpoint answering again") {
		t.Errorf("log:\n%s\nwant the endpoint answering again", log)
	}
}
