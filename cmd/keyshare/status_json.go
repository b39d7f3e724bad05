package main

import (
	"time"

	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/state"
)

// The JSON forms of what members report in etcd: the fields an operator
// reads, in snake_case, without the records' version.

// stuckStatus is a range its owner reports as held by one record.
type stuckStatus struct {
	Member    string    `json:"member"`
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Lo        uint64    `json:"lo"`
	Offset    int64     `json:"offset"`
	Key       string    `json:"key"`
	Since     time.Time `json:"since"`
	Attempts  int       `json:"attempts"`
	Error     string    `json:"error,omitempty"`
}

func stuckStatusOf(s state.StuckRecord) stuckStatus {
	return stuckStatus{Member: s.Member, Topic: s.Topic, Partition: s.Partition, Lo: s.Lo, Offset: s.Offset, Key: s.Key, Since: s.Since, Attempts: s.Attempts, Error: s.Error}
}

// lossStatus is a loss report: records Kafka deleted before the range
// handled them.
type lossStatus struct {
	Member    string    `json:"member"`
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Lo        uint64    `json:"lo"`
	Hi        uint64    `json:"hi"`
	At        time.Time `json:"at"`
	// FromOffset up to LogStart is the window of lost records;
	// KnownPending of them the range had read and not finished.
	FromOffset   int64                `json:"from_offset"`
	LogStart     int64                `json:"log_start"`
	KnownPending int                  `json:"known_pending"`
	Segments     []ledger.LostSegment `json:"segments"`
}

func lossStatusOf(l state.LossRecord) lossStatus {
	return lossStatus{Member: l.Member, Topic: l.Topic, Partition: l.Partition, Lo: l.Lo, Hi: l.Hi, At: l.At,
		FromOffset: l.Window(), LogStart: l.LogStart, KnownPending: l.Known(), Segments: l.Segments}
}
