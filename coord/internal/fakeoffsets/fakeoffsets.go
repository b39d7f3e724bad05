// Package fakeoffsets is an in-memory coord.Offsets: a group's committed
// offsets and the partitions' end offsets, with counters of the calls, so
// that the leader's commit protocol is tested without a broker (as
// hashicorp/raft tests its protocol on in-memory stores).
//
//	k := fakeoffsets.New()
//	k.SetEnd(assign.TopicPartition{Topic: "t"}, 100)
//	cfg.Offsets, cfg.CommitInterval = k, time.Second // a coord.Config: its leader commits to k
package fakeoffsets

import (
	"context"
	"sync"
	"time"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/coord"
)

// Offsets is an in-memory coord.Offsets. The zero value is not usable; call
// New.
type Offsets struct {
	mu        sync.Mutex
	committed map[assign.TopicPartition]coord.KafkaOffset
	ends      map[assign.TopicPartition]int64
	calls     Calls
	// commitDelay holds each Commit this long (or until its context ends).
	commitDelay time.Duration
	refuse      map[assign.TopicPartition]error
}

// Calls counts the calls made, and the partitions they named.
type Calls struct {
	Committed, Commit, Ends int
	CommittedParts          int // partitions named in Committed calls
	CommitParts             int // partitions committed
	History                 []map[assign.TopicPartition]int64
}

// New returns an empty Offsets: no partition has a committed offset.
func New() *Offsets {
	return &Offsets{committed: make(map[assign.TopicPartition]coord.KafkaOffset), ends: make(map[assign.TopicPartition]int64), refuse: make(map[assign.TopicPartition]error)}
}

var _ coord.Offsets = (*Offsets)(nil)

// Committed implements coord.Offsets.
func (o *Offsets) Committed(ctx context.Context, parts []assign.TopicPartition) (map[assign.TopicPartition]coord.KafkaOffset, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls.Committed++
	o.calls.CommittedParts += len(parts)
	out := make(map[assign.TopicPartition]coord.KafkaOffset, len(parts))
	for _, p := range parts {
		if c, ok := o.committed[p]; ok {
			out[p] = c
		} else {
			out[p] = coord.KafkaOffset{Offset: -1}
		}
	}
	return out, nil
}

// Leader is the writer the leader's commits are marked with.
const Leader = "leader"

// Commit implements coord.Offsets.
func (o *Offsets) Commit(ctx context.Context, offsets map[assign.TopicPartition]int64) (map[assign.TopicPartition]error, error) {
	o.mu.Lock()
	d := o.commitDelay
	o.mu.Unlock()
	if d > 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(d):
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls.Commit++
	var failed map[assign.TopicPartition]error
	done := make(map[assign.TopicPartition]int64, len(offsets))
	for p, off := range offsets {
		if err, bad := o.refuse[p]; bad {
			if failed == nil {
				failed = make(map[assign.TopicPartition]error)
			}
			failed[p] = err
			continue
		}
		o.committed[p] = coord.KafkaOffset{Offset: off, By: Leader}
		done[p] = off
		o.calls.CommitParts++
	}
	o.calls.History = append(o.calls.History, done)
	return failed, nil
}

// Ends implements coord.Offsets.
func (o *Offsets) Ends(ctx context.Context, parts []assign.TopicPartition) (map[assign.TopicPartition]int64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls.Ends++
	out := make(map[assign.TopicPartition]int64, len(parts))
	for _, p := range parts {
		if e, ok := o.ends[p]; ok {
			out[p] = e
		}
	}
	return out, nil
}

// SetCommitted sets a partition's committed offset as a client other than
// keyshare would, without keyshare's mark (a plain consumer group before
// the move, or kafka-consumer-groups --reset-offsets).
func (o *Offsets) SetCommitted(p assign.TopicPartition, off int64) {
	o.SetCommittedBy(p, off, "")
}

// SetCommittedBy sets a partition's committed offset as keyshare writer by
// would (a deposed leader's late commit, or keyshare group reset-offsets).
func (o *Offsets) SetCommittedBy(p assign.TopicPartition, off int64, by string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.committed[p] = coord.KafkaOffset{Offset: off, By: by}
}

// CommittedOf is a partition's committed offset, -1 if none.
func (o *Offsets) CommittedOf(p assign.TopicPartition) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	if c, ok := o.committed[p]; ok {
		return c.Offset
	}
	return -1
}

// SetEnd sets a partition's end offset.
func (o *Offsets) SetEnd(p assign.TopicPartition, end int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ends[p] = end
}

// SetCommitDelay makes every Commit take d (a slow broker).
func (o *Offsets) SetCommitDelay(d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.commitDelay = d
}

// Refuse makes Commit refuse partition p with err (nil: accept it again).
func (o *Offsets) Refuse(p assign.TopicPartition, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err == nil {
		delete(o.refuse, p)
	} else {
		o.refuse[p] = err
	}
}

// Calls returns the counters so far.
func (o *Offsets) Calls() Calls {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.calls
	c.History = append([]map[assign.TopicPartition]int64(nil), c.History...)
	return c
}
