package statestore

import (
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/keystate"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// TestDeleteKeyWhilePaused: with the group paused and its member holding
// the key's range, the owner takes DeleteKey's tombstone and appends its
// copy, which DeleteKey reads back; once the group resumes, the key counts
// only its records after the deletion, the other keys all of theirs. Run
// again, DeleteKey finds the owner's copy. With the member stopped, a wait
// ends without a copy (ErrNotConfirmed), and a change that wins over the
// tombstone, landing after it, is a *LostDeletionError.
func TestDeleteKeyWhilePaused(t *testing.T) {
	testutil.ParallelOnKfake(t)
	g := newGroup(t, 1)
	m := g.start("m1", count, nil)
	g.waitCommitted(testutil.Produce(t, g.brokers, g.topic, testutil.KeyedRecords(40, 4)))

	etcd := testutil.NewEtcdClient(t, g.endpoints)
	grp := schema.Group{Prefix: schema.DefaultPrefix, Name: g.name}
	if err := coord.WritePause(t.Context(), etcd, grp, schema.PauseRecord{By: "TestDeleteKeyWhilePaused"}); err != nil {
		t.Fatal(err)
	}
	changelog := DefaultChangelog(g.name, g.topic)
	d, err := DeleteKey(t.Context(), g.kafka(), changelog, 0, []byte("key-1"), 15*time.Second)
	if err != nil {
		t.Fatalf("DeleteKey of key-1 with its owner paused: %v", err)
	}
	if !d.Confirmed || d.Again || string(d.State.Value) != "10" || d.Tombstone < 0 || d.CopyAt <= d.Tombstone || d.CopyToken < d.State.Fence {
		t.Fatalf("DeleteKey of key-1 = %+v: want its count of 10 deleted and the owner's copy after the tombstone, under a token not below the state's", d)
	}
	t.Logf("key-1 deleted by the tombstone at offset %d (applied offset %d, token %d), the owner's copy at offset %d under token %d",
		d.Tombstone, d.State.Applied, d.State.Fence, d.CopyAt, d.CopyToken)
	again, err := DeleteKey(t.Context(), g.kafka(), changelog, 0, []byte("key-1"), 5*time.Second)
	if err != nil || !again.Again || !again.Confirmed || again.CopyToken != d.CopyToken {
		t.Fatalf("DeleteKey of key-1 again = %+v, %v: want the deletion found confirmed under token %d", again, err, d.CopyToken)
	}

	var more []testutil.Record
	for i := range 5 {
		more = append(more, testutil.Record{Key: []byte("key-1"), Value: fmt.Appendf(nil, "after:%d", i)})
	}
	for i := range 3 {
		more = append(more, testutil.Record{Key: []byte("key-0"), Value: fmt.Appendf(nil, "after:%d", i)})
	}
	produced := testutil.Produce(t, g.brokers, g.topic, more)
	if _, err := coord.DeletePause(t.Context(), etcd, grp); err != nil {
		t.Fatal(err)
	}
	g.waitCommitted(produced)
	if got, want := g.counts(), map[string]int{"key-0": 13, "key-1": 5, "key-2": 10, "key-3": 10}; !maps.Equal(got, want) {
		t.Fatalf("counts after the deletion of key-1 = %v, want %v: key-1 counts its 5 records after it", got, want)
	}

	m.stop(t)
	if _, err := DeleteKey(t.Context(), g.kafka(), changelog, 0, []byte("key-2"), time.Second); !errors.Is(err, ErrNotConfirmed) {
		t.Fatalf("DeleteKey of key-2 with no member: %v, want ErrNotConfirmed", err)
	}
	if n, ok := g.counts()["key-2"]; ok {
		t.Fatalf("key-2 still counts %d after its unconfirmed deletion: a restore must read the tombstone", n)
	}

	st, err := ReadKey(t.Context(), g.kafka(), changelog, 0, []byte("key-3"))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := DeleteKey(t.Context(), g.kafka(), changelog, 0, []byte("key-3"), 30*time.Second)
		errc <- err
	}()
	testutil.WaitFor(t, "key-3's tombstone appended", 20*time.Second, func() bool {
		_, ok := g.counts()["key-3"]
		return !ok
	})
	g.appendRaw(keystate.Entry{Key: []byte("key-3"), Value: []byte("11"), Applied: st.Applied + 100, Fence: st.Fence})
	var lost *LostDeletionError
	if err := <-errc; !errors.As(err, &lost) || lost.Change.Applied != st.Applied+100 || lost.At <= lost.Tombstone {
		t.Fatalf("DeleteKey of key-3 with a later change landing after its tombstone: %v, want a *LostDeletionError naming the change", err)
	}
	t.Logf("a change after the tombstone: %v", lost)
}
