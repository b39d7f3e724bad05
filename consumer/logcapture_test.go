package consumer_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// logCapture is a member's log kept for the test to read: the lines
// (each cut to 200 bytes, so a runaway line costs no memory) and the
// length of the longest.
type logCapture struct {
	mu      sync.Mutex
	lines   []string
	longest int
	partial bytes.Buffer
}

// captureLog returns a debug-level logger that writes into a logCapture.
func captureLog(t *testing.T) (hclog.Logger, *logCapture) {
	t.Helper()
	c := &logCapture{}
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Debug, Output: c}), c
}

func (c *logCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.partial.Write(p)
	for {
		line, err := c.partial.ReadString('\n')
		if err != nil { // no newline yet: keep it for the next write
			rest := line
			c.partial.Reset()
			c.partial.WriteString(rest)
			return len(p), nil
		}
		c.longest = max(c.longest, len(line)-1)
		c.lines = append(c.lines, line[:min(len(line)-1, 200)])
	}
}

// count is the number of lines that contain every one of words.
func (c *logCapture) count(words ...string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, l := range c.lines {
		all := true
		for _, w := range words {
			all = all && strings.Contains(l, w)
		}
		if all {
			n++
		}
	}
	return n
}

// longestLine is the length of the longest line written so far.
func (c *logCapture) longestLine() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.longest
}
