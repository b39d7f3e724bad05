package consumer

import (
	"context"
	"sync"
	"time"
)

// jobCtx is a record's context: it ends when the pipeline's does, or when
// the record is cancelled (its range drained or dropped, or the record
// taken out of memory). It behaves as a context.WithCancel of the
// pipeline's context, but makes that only when the handler asks for Done
// or Value: a record whose handler only returns costs no context, and a
// context per record was a large part of dispatching one.
type jobCtx struct {
	parent context.Context
	// job is the record's, for FenceOf (fence.go), which Value answers
	// without making the context; nil in tests that make a bare jobCtx.
	job *job

	mu        sync.Mutex
	made      context.Context    // the context.WithCancel, once asked for
	stop      context.CancelFunc // made's
	cancelled bool
}

// Deadline is the pipeline context's: cancelling a record sets none.
func (c *jobCtx) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Done makes the context, to wait on.
func (c *jobCtx) Done() <-chan struct{} { return c.get().Done() }

// Value makes the context too: context.Cause and contexts derived from
// this one find it through Value. FenceOf's key is answered first, without
// making it: a handler that asks for its record's fence and nothing else
// costs no context.
func (c *jobCtx) Value(key any) any {
	if _, ok := key.(fenceKey); ok {
		if c.job == nil {
			return nil
		}
		return fenceSource(c.job)
	}
	return c.get().Value(key)
}

// Err is what the context's Err would be, without making it.
func (c *jobCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.made != nil:
		return c.made.Err()
	case c.cancelled:
		return context.Canceled
	}
	return c.parent.Err()
}

func (c *jobCtx) String() string { return "keyshare record context" }

func (c *jobCtx) get() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.made == nil {
		if c.cancelled {
			// Cancelled before the pipeline's context ended: that is its
			// error and cause, whatever the pipeline's context does later.
			c.made, c.stop = context.WithCancel(context.WithoutCancel(c.parent))
			c.stop()
		} else {
			c.made, c.stop = context.WithCancel(c.parent)
		}
	}
	return c.made
}

// cancel ends the context, unless the pipeline's has ended already: then
// the context keeps that one's error and cause, as a WithCancel does.
func (c *jobCtx) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.made != nil {
		c.stop()
		return
	}
	select {
	case <-c.parent.Done():
	default:
		c.cancelled = true
	}
}
