package coord

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/testutil"
)

// The recorder under Session.Flush and Session.Release, on arbitrary keys.

// owner is a guard key whose mod revision a writer remembers: the writer
// owns its ranges while the key is unchanged.
type owner struct {
	key string
	rev int64
}

func (o owner) guard() []clientv3.Cmp {
	return []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(o.key), "=", o.rev)}
}

func claim(t *testing.T, cli *clientv3.Client, key string) owner {
	t.Helper()
	resp, err := cli.Put(t.Context(), key, "member")
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return owner{key, resp.Header.Revision}
}

type kv struct {
	value string
	rev   int64
}

// dump returns every key under prefix with its value and mod revision.
func dump(t *testing.T, cli *clientv3.Client, prefix string) map[string]kv {
	t.Helper()
	resp, err := cli.Get(t.Context(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("get %s: %v", prefix, err)
	}
	out := map[string]kv{}
	for _, x := range resp.Kvs {
		out[string(x.Key)] = kv{string(x.Value), x.ModRevision}
	}
	return out
}

// readEntry reads and decodes the entry at key.
func readEntry(t *testing.T, cli *clientv3.Client, key string, r ledger.HashRange) ledger.Entry {
	t.Helper()
	resp, err := cli.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("%s: not written", key)
	}
	e, err := ledger.Decode(key, resp.Kvs[0].Value, r)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func mustFence(t *testing.T, err error, session bool, keys ...string) {
	t.Helper()
	var fe *FencedError
	if !errors.As(err, &fe) || !errors.Is(err, ErrFenced) {
		t.Fatalf("Record = %v, want a *FencedError", err)
	}
	if fe.Session != session || !slices.Equal(fe.Keys, keys) {
		t.Fatalf("fenced %+v, want Session=%v Keys=%q", fe, session, keys)
	}
	if !session {
		for _, k := range keys {
			if !strings.Contains(fe.Error(), k) {
				t.Fatalf("error %q does not name %s", fe, k)
			}
		}
	}
}

// sampleEntry is a state with pending offsets, distinct per i.
func sampleEntry(i int) ledger.Entry {
	n := int64(100 + i)
	return ledger.Entry{Segments: []ledger.Segment{
		{Lo: 0, Hi: 1 << 31, Next: n, Pending: []int64{n - 7, n - 3}},
		{Lo: 1 << 31, Hi: ledger.HashSpace, Next: n + 1},
	}}
}

// mustEqual fails unless the entries encode alike.
func mustEqual(t *testing.T, what string, got, want ledger.Entry) {
	t.Helper()
	if !bytes.Equal(ledger.Encode(got), ledger.Encode(want)) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func TestFlushRecorder(t *testing.T) {
	cli, _ := testutil.StartEtcd(t)
	rec := newRecorder(cli, 0)

	t.Run("writes under the guard and reads back", func(t *testing.T) {
		p := "/t/readback/"
		o := claim(t, cli, p+"owner")
		e := sampleEntry(1)
		if err := rec.record(t.Context(), nil, []write{{Key: p + "l/0", Entry: e, Guard: o.guard()}}); err != nil {
			t.Fatal(err)
		}
		mustEqual(t, "stored entry", readEntry(t, cli, p+"l/0", ledger.Full), e)
	})

	t.Run("stale guard is fenced and changes nothing", func(t *testing.T) {
		p := "/t/stale/"
		old := claim(t, cli, p+"owner")
		if err := rec.record(t.Context(), nil, []write{{Key: p + "l/0", Entry: sampleEntry(1), Guard: old.guard()}}); err != nil {
			t.Fatal(err)
		}
		claim(t, cli, p+"owner") // the range moved to another member
		before := dump(t, cli, p)
		err := rec.record(t.Context(), nil, []write{{
			Key: p + "l/0", Entry: sampleEntry(2), Guard: old.guard(),
			Also: []clientv3.Op{clientv3.OpPut(p+"ack", "1")},
		}})
		mustFence(t, err, false, p+"l/0")
		if after := dump(t, cli, p); !maps.Equal(before, after) {
			t.Fatalf("a fenced write changed etcd:\n before %v\n after  %v", before, after)
		}
	})

	t.Run("retry after a timeout leaves the same state", func(t *testing.T) {
		p := "/t/retry/"
		o := claim(t, cli, p+"owner")
		w := []write{
			{Key: p + "l/0", Entry: sampleEntry(1), Guard: o.guard()},
			{Key: p + "l/1", Entry: sampleEntry(2), Guard: o.guard()},
		}
		// The first attempt applied but its reply was lost; the caller
		// retries with the same input.
		if err := rec.record(t.Context(), nil, w); err != nil {
			t.Fatal(err)
		}
		first := dump(t, cli, p)
		if err := rec.record(t.Context(), nil, w); err != nil {
			t.Fatalf("retry: %v", err)
		}
		second := dump(t, cli, p)
		for k, v := range first {
			if second[k].value != v.value {
				t.Fatalf("%s: %s after the first write, %s after the retry", k, v.value, second[k].value)
			}
		}
		if len(second) != len(first) {
			t.Fatalf("keys %v after the retry, %v before", slices.Sorted(maps.Keys(second)), slices.Sorted(maps.Keys(first)))
		}
		mustEqual(t, "l/1", readEntry(t, cli, p+"l/1", ledger.Full), sampleEntry(2))
	})

	t.Run("a retry after losing ownership does not overwrite the new owner", func(t *testing.T) {
		p := "/t/retry-fenced/"
		old := claim(t, cli, p+"owner")
		w := []write{{Key: p + "l/0", Entry: sampleEntry(1), Guard: old.guard()}}
		if err := rec.record(t.Context(), nil, w); err != nil {
			t.Fatal(err)
		}
		// Meanwhile the range moved and its new owner wrote.
		nu := claim(t, cli, p+"owner")
		if err := rec.record(t.Context(), nil, []write{{Key: p + "l/0", Entry: sampleEntry(5), Guard: nu.guard()}}); err != nil {
			t.Fatal(err)
		}
		mustFence(t, rec.record(t.Context(), nil, w), false, p+"l/0")
		mustEqual(t, "entry after the stale retry", readEntry(t, cli, p+"l/0", ledger.Full), sampleEntry(5))
	})

	t.Run("more writes than one transaction holds", func(t *testing.T) {
		p := "/t/split/"
		sess := claim(t, cli, p+"session")
		o := claim(t, cli, p+"owner")
		const n = 2*DefaultMaxTxnOps + 44 // 300
		var w []write
		for i := range n {
			w = append(w, write{Key: fmt.Sprintf("%sl/%04d", p, i), Entry: sampleEntry(i), Guard: o.guard()})
		}
		if err := rec.record(t.Context(), sess.guard(), w); err != nil {
			t.Fatal(err)
		}
		got := dump(t, cli, p+"l/")
		revs := map[int64]int{}
		for i := range n {
			k := fmt.Sprintf("%sl/%04d", p, i)
			mustEqual(t, k, readEntry(t, cli, k, ledger.Full), sampleEntry(i))
			revs[got[k].rev]++
		}
		// One common and one own compare per write: 127 writes fit in a
		// transaction of at most 128 compares, so 300 take 3.
		if len(revs) != 3 {
			t.Fatalf("written in %d transactions (%v), want 3", len(revs), revs)
		}
	})

	t.Run("a smaller operation limit counts the extra operations", func(t *testing.T) {
		p := "/t/split-also/"
		o := claim(t, cli, p+"owner")
		small := newRecorder(cli, 10)
		var w []write
		for i := range 12 {
			k := fmt.Sprintf("%sl/%02d", p, i)
			w = append(w, write{Key: k, Entry: sampleEntry(i), Guard: o.guard(), Also: []clientv3.Op{clientv3.OpPut(k+"/ack", "1")}})
		}
		if err := small.record(t.Context(), nil, w); err != nil {
			t.Fatal(err)
		}
		got := dump(t, cli, p+"l/")
		revs := map[int64]bool{}
		for i := range 12 {
			k := fmt.Sprintf("%sl/%02d", p, i)
			if got[k+"/ack"].rev != got[k].rev {
				t.Fatalf("%s and its extra operation were written apart (revisions %d, %d)", k, got[k].rev, got[k+"/ack"].rev)
			}
			revs[got[k].rev] = true
		}
		if len(revs) != 3 { // 2 operations per write, 10 per transaction
			t.Fatalf("written in %d transactions, want 3", len(revs))
		}
	})

	t.Run("fenced and unfenced writes mixed", func(t *testing.T) {
		p := "/t/mixed/"
		var w []write
		var fenced []string
		for i := range 5 {
			o := claim(t, cli, fmt.Sprintf("%sowner/%d", p, i))
			k := fmt.Sprintf("%sl/%d", p, i)
			if i == 1 || i == 3 {
				claim(t, cli, o.key) // lost
				fenced = append(fenced, k)
			}
			w = append(w, write{Key: k, Entry: sampleEntry(i), Guard: o.guard(), Also: []clientv3.Op{clientv3.OpPut(k+"/ack", "1")}})
		}
		mustFence(t, rec.record(t.Context(), nil, w), false, fenced...)
		got := dump(t, cli, p+"l/")
		for i, x := range w {
			_, written := got[x.Key]
			_, acked := got[x.Key+"/ack"]
			if want := !slices.Contains(fenced, x.Key); written != want || acked != want {
				t.Fatalf("%s: written %v, extra operation %v, want %v", x.Key, written, acked, want)
			}
			if written {
				mustEqual(t, x.Key, readEntry(t, cli, x.Key, ledger.Full), sampleEntry(i))
			}
		}
	})

	t.Run("failing common guard fences the session", func(t *testing.T) {
		p := "/t/session/"
		sess := claim(t, cli, p+"session")
		o := claim(t, cli, p+"owner")
		claim(t, cli, p+"session") // the session is gone
		before := dump(t, cli, p)
		w := []write{
			{Key: p + "l/0", Entry: sampleEntry(0), Guard: o.guard()},
			{Key: p + "l/1", Entry: sampleEntry(1), Guard: o.guard()},
		}
		err := rec.record(t.Context(), sess.guard(), w)
		mustFence(t, err, true, p+"l/0", p+"l/1")
		if after := dump(t, cli, p); !maps.Equal(before, after) {
			t.Fatalf("a fenced session changed etcd:\n before %v\n after  %v", before, after)
		}
	})

	t.Run("an etcd failure is an error, not a fence", func(t *testing.T) {
		p := "/t/cancelled/"
		o := claim(t, cli, p+"owner")
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		err := rec.record(ctx, nil, []write{{Key: p + "l/0", Entry: sampleEntry(0), Guard: o.guard()}})
		if err == nil || errors.Is(err, ErrFenced) {
			t.Fatalf("Record with a cancelled context = %v, want a plain error", err)
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Record with a cancelled context = %v, want it to wrap context.Canceled", err)
		}
	})

	t.Run("nothing to write", func(t *testing.T) {
		if err := rec.record(t.Context(), nil, nil); err != nil {
			t.Fatal(err)
		}
	})
}

// bigEntry is a state with n pending offsets of eleven digits each.
func bigEntry(n int) ledger.Entry {
	pending := make([]int64, n)
	for i := range pending {
		pending[i] = 10_000_000_000 + int64(i)
	}
	return ledger.Entry{Segments: []ledger.Segment{{Lo: 0, Hi: ledger.HashSpace, Next: 20_000_000_000, Pending: pending}}}
}

func TestFlushRecorderBytes(t *testing.T) {
	cli, _ := testutil.StartEtcd(t)

	t.Run("a batch is cut by bytes", func(t *testing.T) {
		p := "/t/bytes/"
		o := claim(t, cli, p+"owner")
		small := newRecorder(cli, 0)
		small.maxBytes = 8 << 10
		var w []write
		for i := range 10 {
			w = append(w, write{Key: fmt.Sprintf("%sl/%02d", p, i), Entry: bigEntry(250), Guard: o.guard()})
		}
		size := len(w[0].Key) + len(ledger.Encode(w[0].Entry)) // about 3 KiB
		if err := small.record(t.Context(), nil, w); err != nil {
			t.Fatal(err)
		}
		per := (8 << 10) / size // writes that fit in 8 KiB
		revs := map[int64]int{}
		for k, v := range dump(t, cli, p+"l/") {
			revs[v.rev]++
			mustEqual(t, k, readEntry(t, cli, k, ledger.Full), bigEntry(250))
		}
		if want := (10 + per - 1) / per; len(revs) != want {
			t.Fatalf("written in %d transactions (%v), want %d of at most %d writes of %d bytes", len(revs), revs, want, per, size)
		}
	})

	t.Run("an entry etcd refuses for its size does not hold back the others", func(t *testing.T) {
		p := "/t/toolarge/"
		o := claim(t, cli, p+"owner")
		rec := newRecorder(cli, 0)
		huge := bigEntry(150_000) // about 1.8 MB, over etcd's 1.5 MiB limit
		w := []write{
			{Key: p + "l/0", Entry: sampleEntry(0), Guard: o.guard()},
			{Key: p + "l/1", Name: p + "r/1", Entry: huge, Guard: o.guard()},
			{Key: p + "l/2", Entry: sampleEntry(2), Guard: o.guard()},
		}
		err := rec.record(t.Context(), nil, w)
		var tl *TooLargeError
		if !errors.As(err, &tl) || errors.Is(err, ErrFenced) {
			t.Fatalf("record = %v, want a *TooLargeError only", err)
		}
		if !slices.Equal(tl.Keys, []string{p + "r/1"}) || !strings.Contains(err.Error(), "--max-request-bytes") {
			t.Fatalf("too large: %v (keys %q), want it to name %s and the etcd flag", err, tl.Keys, p+"r/1")
		}
		got := dump(t, cli, p+"l/")
		if _, ok := got[p+"l/1"]; ok {
			t.Fatal("the oversized entry was written")
		}
		mustEqual(t, "l/0", readEntry(t, cli, p+"l/0", ledger.Full), sampleEntry(0))
		mustEqual(t, "l/2", readEntry(t, cli, p+"l/2", ledger.Full), sampleEntry(2))
	})
}
