package consumer

import (
	"context"
	"errors"
	"testing"
	"time"
)

type ctxTestKey struct{}

var errStopped = errors.New("stopped")

// TestJobCtxActsAsWithCancel checks a record's context against the
// context.WithCancel it stands for: cancelled by the record or by the
// pipeline, before or after a handler asked for Done, it reports the same
// Err, Cause, Done, values and deadline, and ends contexts derived from it.
func TestJobCtxActsAsWithCancel(t *testing.T) {
	deadline := time.Now().Add(time.Hour)
	for _, tc := range []struct {
		name         string
		doneFirst    bool // a handler asks for Done before the cancel
		cancelRecord bool
		cancelParent bool
		parentFirst  bool // the pipeline's context ends before the record's cancel
		wantErr      error
		wantCause    error
	}{
		{"live", false, false, false, false, nil, nil},
		{"live, Done asked", true, false, false, false, nil, nil},
		{"record cancelled", false, true, false, false, context.Canceled, context.Canceled},
		{"record cancelled, Done asked", true, true, false, false, context.Canceled, context.Canceled},
		{"pipeline cancelled", false, false, true, false, context.Canceled, errStopped},
		{"pipeline cancelled, Done asked", true, false, true, false, context.Canceled, errStopped},
		{"record, then pipeline", false, true, true, false, context.Canceled, context.Canceled},
		{"record, then pipeline, Done asked", true, true, true, false, context.Canceled, context.Canceled},
		{"pipeline, then record", false, true, true, true, context.Canceled, errStopped},
		{"pipeline, then record, Done asked", true, true, true, true, context.Canceled, errStopped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, stopBase := context.WithDeadline(context.WithValue(context.Background(), ctxTestKey{}, "v"), deadline)
			defer stopBase()
			parent, stopParent := context.WithCancelCause(base)
			defer stopParent(nil)
			c := &jobCtx{parent: parent}
			var derived context.Context
			if tc.doneFirst {
				_ = c.Done()
				var stop context.CancelFunc
				derived, stop = context.WithTimeout(c, time.Hour)
				defer stop()
			}
			if tc.parentFirst {
				stopParent(errStopped)
			}
			if tc.cancelRecord {
				c.cancel()
			}
			if tc.cancelParent {
				stopParent(errStopped)
			}
			if err := c.Err(); !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Errorf("Err = %v, want %v", err, tc.wantErr)
			}
			if cause := context.Cause(c); cause != tc.wantCause {
				t.Errorf("Cause = %v, want %v", cause, tc.wantCause)
			}
			select {
			case <-c.Done():
				if tc.wantErr == nil {
					t.Errorf("Done closed for a live record")
				}
			default:
				if tc.wantErr != nil {
					t.Errorf("Done open for a cancelled record")
				}
			}
			if derived != nil && (derived.Err() != nil) != (tc.wantErr != nil) {
				t.Errorf("derived context's Err = %v, want %v", derived.Err(), tc.wantErr)
			}
			if got := c.Value(ctxTestKey{}); got != "v" {
				t.Errorf("Value = %v, want the pipeline context's %q", got, "v")
			}
			if got, ok := c.Deadline(); !ok || !got.Equal(deadline) {
				t.Errorf("Deadline = %v %v, want %v", got, ok, deadline)
			}
		})
	}
}

// TestJobCtxFenceMakesNoContext: FenceOf's lookup through a record's
// context (and through a context derived from it by WithValue, as
// tracing's is) is answered without making the context; any other value
// makes it.
func TestJobCtxFenceMakesNoContext(t *testing.T) {
	p := &pipeline{}
	j := &job{p: p}
	j.ctx = jobCtx{parent: context.Background(), job: j}
	derived := context.WithValue(&j.ctx, ctxTestKey{}, "v")
	src, ok := derived.Value(fenceKey{}).(fenceSource)
	if !ok || src != fenceSource(j) {
		t.Fatalf("fence source %v, %v; want the record's job", src, ok)
	}
	if j.ctx.made != nil {
		t.Fatal("the fence lookup made the record's context")
	}
	if (&jobCtx{parent: context.Background()}).Value(fenceKey{}) != nil {
		t.Error("a context without a job answered the fence key")
	}
	_ = derived.Value(struct{}{})
	if j.ctx.made == nil {
		t.Fatal("another value did not make the context")
	}
}
