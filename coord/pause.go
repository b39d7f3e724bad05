package coord

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/schema"
)

// PauseState is whether the group is paused, as a member sees it.
type PauseState struct {
	Paused bool
	Record schema.PauseRecord // when Paused and the value is readable
	Err    error              // the value is damaged (the group counts as paused)
	// Rev is the paused key's ModRevision when Paused: a guard on it
	// (ResetGuard.PausedRev) holds only while this same pause stands.
	Rev int64
}

// ReadPause reads the group's pause state, and the etcd revision it was
// read at. A damaged value counts as paused: stopping is the side on which
// nothing is lost.
func ReadPause(ctx context.Context, cli *clientv3.Client, g schema.Group) (PauseState, int64, error) {
	s := schemaOf(g)
	resp, err := cli.Get(ctx, s.Paused())
	if err != nil {
		return PauseState{}, 0, fmt.Errorf("coord: read %s: %w", s.Paused(), err)
	}
	if len(resp.Kvs) == 0 {
		return PauseState{}, resp.Header.Revision, nil
	}
	return pauseState(resp.Kvs[0]), resp.Header.Revision, nil
}

func pauseState(kv *mvccpb.KeyValue) PauseState {
	r, err := schema.DecodePause(string(kv.Key), kv.Value)
	return PauseState{Paused: true, Record: r, Err: err, Rev: kv.ModRevision}
}

// WritePause pauses the group (rec.V and rec.At are filled in).
func WritePause(ctx context.Context, cli *clientv3.Client, g schema.Group, rec schema.PauseRecord) error {
	s := schemaOf(g)
	rec.V = recordVersion
	if rec.At.IsZero() {
		rec.At = time.Now().UTC()
	}
	if _, err := cli.Put(ctx, s.Paused(), mustJSON(rec)); err != nil {
		return fmt.Errorf("coord: write %s: %w", s.Paused(), err)
	}
	return nil
}

// DeletePause resumes the group; it reports whether it was paused.
func DeletePause(ctx context.Context, cli *clientv3.Client, g schema.Group) (bool, error) {
	s := schemaOf(g)
	resp, err := cli.Delete(ctx, s.Paused())
	if err != nil {
		return false, fmt.Errorf("coord: delete %s: %w", s.Paused(), err)
	}
	return resp.Deleted > 0, nil
}

// PauseUpdates delivers the group's pause state each time it changes, the
// first time as soon as it is read. Only the latest is kept.
func (s *Session) PauseUpdates() <-chan PauseState { return s.pauses }

// watchPause feeds PauseUpdates for the session's life.
func (s *Session) watchPause() {
	publish := func(st PauseState) {
		select {
		case <-s.pauses: // drop the stale one
		default:
		}
		s.pauses <- st
		if st.Err != nil {
			s.log.Error("the group's pause key is damaged; the member stays paused until an operator resumes the group (keyshare group resume)", "error", st.Err)
		}
	}
	for s.ctx.Err() == nil {
		st, rev, err := ReadPause(s.ctx, s.cli, s.group())
		if err != nil {
			s.log.Warn("read pause state", "error", err)
			sleep(s.ctx, time.Second)
			continue
		}
		publish(st)
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
		for wr := range s.cli.Watch(wctx, s.schema.Paused(), clientv3.WithRev(rev+1)) {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					publish(PauseState{})
				} else {
					publish(pauseState(ev.Kv))
				}
			}
		}
		cancel()
		sleep(s.ctx, 200*time.Millisecond)
	}
}
