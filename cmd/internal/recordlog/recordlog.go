// Package recordlog is the log of handled records that the checkers read:
// one JSON line per record handled, appended before the record counts as
// done. keyshare-bench member --record writes it from its simulated
// handler, keyshare demo's endpoint for the members that deliver to it;
// the demo's final check and the fault matrix (chaos/) read it to prove
// that no record was lost and each key's records ran in order.
package recordlog

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/cmd/internal/clientflags"
)

// Line is one line of a record log.
type Line struct {
	Member    string    `json:"member"`
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Key       string    `json:"key"`
	Value     string    `json:"value"`
	Start     time.Time `json:"start"` // when the handler was called (this attempt)
	Time      time.Time `json:"time"`  // when it finished
}

// Log appends one Line per handled record; it is safe for concurrent use.
type Log struct {
	mu sync.Mutex
	f  *os.File
	w  *bufio.Writer
}

// Open opens the log at path for appending, creating it readable by this
// user only: it holds record values. flag names it in errors ("--record").
func Open(flag, path string) (*Log, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	clientflags.WarnOpenToOthers(flag, path, "record keys and values")
	return &Log{f: f, w: bufio.NewWriter(f)}, nil
}

// Write appends the line of m, handled by member from start until now, and
// hands it to the OS before returning, so that a record counts as done
// only once its side effect is in the file (a SIGKILL of the process does
// not lose it).
func (l *Log) Write(member string, m *kafka.Message, start time.Time) error {
	b, _ := json.Marshal(Line{
		Member: member, Topic: *m.TopicPartition.Topic, Partition: m.TopicPartition.Partition,
		Offset: int64(m.TopicPartition.Offset), Key: string(m.Key), Value: string(m.Value), Start: start.UTC(), Time: time.Now().UTC(),
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.w.Write(append(b, '\n')); err != nil {
		return err
	}
	return l.w.Flush()
}

// Close flushes and closes the file.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.w.Flush()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}
