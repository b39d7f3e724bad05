package deliver

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/keyshare/keyshare/deliver/deliverpb"
)

// The tests of this file kill the endpoint, or its connection, while it
// works on a request, with no Timeout set: nothing bounds the request but
// the connection's life, so the member must notice it end and send the
// record again.

// TestConnectionResetMidRequest: the endpoint resets the connection of
// the first request it works on; the member sends the record again on a
// new connection and it is taken.
func TestConnectionResetMidRequest(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	ep, _ := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		readRequest(t, r)
		if n.Add(1) > 1 {
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		conn.(*net.TCPConn).SetLinger(0) // close with a RST
		conn.Close()
	}, func(c *Config) { c.Timeout = 0 })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := ep.Handler()(ctx, message("orders", 0, 1, "k")); err != nil {
		t.Fatalf("handler = %v, want the record taken after the reset", err)
	}
	if counts, _ := requestCounts(t, ep); n.Load() != 2 || counts["trouble"] != 1 || counts["done"] != 1 {
		t.Errorf("%d requests, by outcome %v: want the reset one in trouble, then one done", n.Load(), counts)
	}
}

// pyEndpointPath is the Python endpoint the CLI's tests run
// (docs/delivery.md's example).
const pyEndpointPath = "../cmd/keyshare/testdata/endpoint.py"

// startPython runs the Python endpoint on port ("0": any) and returns
// its process and port once it listens.
func startPython(t *testing.T, port, log, delayFile string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command("python3", pyEndpointPath, "--port", port, "--log", log, "--delay-file", delayFile)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("python3 %s (this test needs python3): %v", pyEndpointPath, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "listening on ") {
		t.Fatalf("endpoint.py did not start (%v): %q", err, line)
	}
	return cmd, strings.TrimSpace(strings.TrimPrefix(line, "listening on "))
}

// TestEndpointKilledMidRequest: the endpoint's process is killed while it
// works on a request (a minute's wait, no Timeout set) and started again
// on the same port: the member finds the connection gone, sends the
// record again, and the new process applies it.
func TestEndpointKilledMidRequest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log, delay := filepath.Join(dir, "applied.jsonl"), filepath.Join(dir, "delay")
	// The endpoint reads its delay at each request: from a pipe, the test
	// knows when the request is in.
	if err := syscall.Mkfifo(delay, 0o600); err != nil {
		t.Fatal(err)
	}
	first, port := startPython(t, "0", log, delay)
	ep, err := New(Config{URL: "http://127.0.0.1:" + port + "/", Backoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	result := make(chan error, 1)
	go func() { result <- ep.Handler()(ctx, message("orders", 0, 7, "k")) }()
	if err := os.WriteFile(delay, []byte("60"), 0o600); err != nil { // returns once the endpoint reads it
		t.Fatal(err)
	}
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	if err := os.Remove(delay); err != nil { // no delay file: no wait
		t.Fatal(err)
	}
	startPython(t, port, log, delay)
	if err := <-result; err != nil {
		t.Fatalf("handler = %v, want the record applied by the endpoint started again", err)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	type line struct {
		Offset  int64 `json:"offset"`
		Attempt int   `json:"attempt"`
	}
	var applied []line
	for _, text := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var a line
		if err := json.Unmarshal([]byte(text), &a); err != nil {
			t.Fatalf("log line %q: %v", text, err)
		}
		applied = append(applied, a)
	}
	if len(applied) != 1 || applied[0].Offset != 7 || applied[0].Attempt < 2 {
		t.Errorf("applied %+v, want offset 7 once, by a request after the first (attempt 2 or more)", applied)
	}
}

// TestGRPCServerStopsMidCall: the endpoint's server goes away while it
// works on a call (its connections closed, as a killed process's are)
// and comes back on the same port: the member finds the call ended, calls
// again, and the record is taken.
func TestGRPCServerStopsMidCall(t *testing.T) {
	t.Parallel()
	ln := listen(t, "127.0.0.1:0")
	addr := ln.Addr().String()
	working := make(chan struct{})
	stop := serveGRPC(t, ln, func(ctx context.Context, _ *deliverpb.DeliverRequest) (*deliverpb.DeliverResponse, error) {
		close(working)
		<-ctx.Done() // a minute's work, ended by the server going away
		return nil, ctx.Err()
	})
	ep, err := New(Config{URL: "grpc://" + addr, Backoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	result := make(chan error, 1)
	go func() { result <- ep.Handler()(ctx, message("orders", 0, 7, "k")) }()
	<-working
	stop()
	var attempt atomic.Int32
	serveGRPC(t, listen(t, addr), func(_ context.Context, req *deliverpb.DeliverRequest) (*deliverpb.DeliverResponse, error) {
		attempt.Store(req.GetRecords()[0].GetAttempt())
		return results(done), nil
	})
	if err := <-result; err != nil {
		t.Fatalf("handler = %v, want the record taken by the server back", err)
	}
	if attempt.Load() < 2 {
		t.Errorf("the server back got attempt %d, want a later attempt than the first call's", attempt.Load())
	}
}

// TestPythonEndpointKeepsItsDeadline: the docs' Python endpoint does not
// apply a request whose Keyshare-Deadline passed while it worked (here a
// 1.5 s wait against a 0.5 s timeout); the member sends the record again
// after the deadline and its grace, and the endpoint applies that
// attempt, the record's only application.
func TestPythonEndpointKeepsItsDeadline(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log, delay := filepath.Join(dir, "applied.jsonl"), filepath.Join(dir, "delay")
	if err := os.WriteFile(delay, []byte("1.5"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, port := startPython(t, "0", log, delay)
	ep, err := New(Config{URL: "http://127.0.0.1:" + port + "/", Timeout: 500 * time.Millisecond,
		Backoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	result := make(chan error, 1)
	go func() { result <- ep.Handler()(ctx, message("orders", 0, 7, "k")) }()
	type line struct {
		Expired []int64 `json:"expired"`
		Offset  *int64  `json:"offset"`
		Attempt int     `json:"attempt"`
	}
	read := func() []line {
		b, err := os.ReadFile(log)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		var lines []line
		for _, text := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if text == "" {
				continue
			}
			var l line
			if err := json.Unmarshal([]byte(text), &l); err != nil {
				t.Fatalf("log line %q: %v", text, err)
			}
			lines = append(lines, l)
		}
		return lines
	}
	// The first request's line is written once the endpoint's wait ends,
	// before the member's grace does: the next request then finds no wait.
	for start := time.Now(); len(read()) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			t.Fatal("the endpoint wrote nothing about the first request within 30s")
		}
	}
	if err := os.WriteFile(delay, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := <-result; err != nil {
		t.Fatalf("handler = %v, want the record applied by a later attempt", err)
	}
	lines := read()
	if len(lines) != 2 || len(lines[0].Expired) != 1 || lines[0].Expired[0] != 7 ||
		lines[1].Offset == nil || *lines[1].Offset != 7 || lines[1].Attempt != 2 {
		t.Errorf("log %+v, want offset 7 expired, then applied once by attempt 2", lines)
	}
}

// TestStoppedRequestCountsAsAnAttempt: the member stops a request the
// endpoint is still working on (the record's context ends: its range
// drained or moved); when this member sends the record again, the request
// carries the next attempt, not the first again, so the endpoint can
// order it after the one it may still be working on.
func TestStoppedRequestCountsAsAnAttempt(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var attempts []int
	started := make(chan struct{}, 1)
	ep, _ := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		req := readRequest(t, r)
		mu.Lock()
		attempts = append(attempts, req.Records[0].Attempt)
		first := len(attempts) == 1
		mu.Unlock()
		if first {
			started <- struct{}{}
			<-r.Context().Done() // works until the member closes the request
		}
	}, func(c *Config) { c.Timeout = 0 })
	ctx, cancel := context.WithCancel(t.Context())
	result := make(chan error, 1)
	go func() { result <- ep.Handler()(ctx, message("orders", 0, 7, "k")) }()
	<-started
	cancel()
	if err := <-result; err == nil {
		t.Fatal("the stopped call reported the record done")
	}
	if err := ep.Handler()(t.Context(), message("orders", 0, 7, "k")); err != nil {
		t.Fatalf("the record sent again: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(attempts, []int{1, 2}) {
		t.Errorf("requests came with attempts %v, want [1 2]: the stopped request counts as an attempt", attempts)
	}
}
