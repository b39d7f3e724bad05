package consumer

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// TestTopKeysFindsHotKeyAmongMany: one key with a tenth of the busy time
// among thousands of keys is reported first, its time within the
// summary's error bound of the truth, and no cold key is reported above it.
func TestTopKeysFindsHotKeyAmongMany(t *testing.T) {
	var k topKeys
	rng := rand.New(rand.NewPCG(1, 2))
	const hot = uint32(0xdeadbeef)
	var hotTrue, total time.Duration
	for range 100_000 {
		h, w := rng.Uint32(), time.Millisecond
		if rng.IntN(10) == 0 {
			h = hot
		}
		if h == hot {
			hotTrue += w
		}
		total += w
		k.add(h, w, nil)
	}
	top := k.top(assign.MaxHotKeys)
	if len(top) == 0 || top[0].hash != hot {
		t.Fatalf("top keys %v: want %#x first", top, hot)
	}
	// Space-saving: a tracked key's lower bound is at most its true time
	// and at least the truth minus total/capacity.
	if top[0].weight > hotTrue || top[0].weight < hotTrue-total/hotCapacity {
		t.Fatalf("hot key's lower bound %v, true %v, total %v: want within total/%d below the truth", top[0].weight, hotTrue, total, hotCapacity)
	}
	for _, e := range top[1:] {
		if e.weight > total/hotCapacity {
			t.Errorf("cold key %#x reported with %v, more than total/capacity %v", e.hash, e.weight, total/hotCapacity)
		}
	}
}

// TestTopKeysUniformLooksCold: uniform keys, many more than the summary
// holds, are not reported with anything near a hot key's share.
func TestTopKeysUniformLooksCold(t *testing.T) {
	var k topKeys
	rng := rand.New(rand.NewPCG(3, 4))
	var total time.Duration
	for range 50_000 {
		k.add(uint32(rng.IntN(10_000)), time.Millisecond, nil)
		total += time.Millisecond
	}
	for _, e := range k.top(assign.MaxHotKeys) {
		if e.weight > total/100 {
			t.Errorf("uniform key %d reported with %v of %v: want under 1%%", e.hash, e.weight, total)
		}
	}
}

// TestTopKeysExact: with fewer keys than the summary holds the times are
// exact, ordered largest first (ties by hash), and at most n come back.
func TestTopKeysExact(t *testing.T) {
	var k topKeys
	for h, w := range map[uint32]time.Duration{7: 3, 9: 5, 2: 5, 4: 1, 8: 2} {
		k.add(h, w, nil)
	}
	k.add(4, 1, nil)
	got := k.top(4)
	want := []hotEntry{{hash: 2, weight: 5}, {hash: 9, weight: 5}, {hash: 7, weight: 3}, {hash: 4, weight: 2}}
	if len(got) != len(want) {
		t.Fatalf("top %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("top %v, want %v", got, want)
		}
	}
}

// TestTopKeysKeepsKeyText: each tracked hash keeps the key of the record
// that last added to it, its first state.HotKeyBytes bytes only, shown
// escaped and with its length when cut; a key that displaces another
// takes its place with its own text; and counting allocates nothing.
func TestTopKeysKeepsKeyText(t *testing.T) {
	var k topKeys
	long := []byte(strings.Repeat("k", 300))
	hostile := []byte("\x1b[2J\u202eevil")
	k.add(1, 10, []byte("first"))
	k.add(1, 10, []byte("key-1")) // the same hash, another key: the last one shows
	k.add(2, 5, long)
	k.add(3, 4, hostile)
	k.add(4, 3, nil)
	texts := map[uint32]string{}
	for _, e := range k.top(hotCapacity) {
		texts[e.hash] = e.text()
	}
	want := map[uint32]string{1: "key-1", 2: strings.Repeat("k", 64) + "... (300 bytes)", 3: `"\x1b[2J\u202eevil"`, 4: ""}
	if !maps.Equal(texts, want) {
		t.Fatalf("key texts %v, want %v", texts, want)
	}
	// Fill the summary, then displace the lightest entry: the newcomer
	// shows its own key, not the displaced one's bytes.
	for h := uint32(10); k.n < hotCapacity; h++ {
		k.add(h, 100, long)
	}
	k.add(99, 1000, []byte("new"))
	if top := k.top(1); len(top) != 1 || top[0].hash != 99 || top[0].text() != "new" {
		t.Fatalf("after displacing: top %v, want hash 99 shown as new", top)
	}
	if n := testing.AllocsPerRun(1000, func() { k.add(99, 1, long) }); n != 0 {
		t.Errorf("add allocates %v times per call, want 0", n)
	}
}

// TestHotKeyTextAlwaysStored: whatever bytes a producer puts in a key
// (control bytes, invalid UTF-8, bidi controls, megabytes), the text a
// member keeps for it passes the check of the stored names: a hostile key
// can never make the member's names, written in its load report's
// transaction, be refused.
func TestHotKeyTextAlwaysStored(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	alphabet := []string{"a", "\x00", "\x1b", "\x7f", "\xc2\x9b", "\u202e", "日", "\xff", "\xe6\x97", " ", "\\", "\"", "\t", "\n"}
	for i := range 2000 {
		var b []byte
		for range rng.IntN(200) {
			b = append(b, alphabet[rng.IntN(len(alphabet))]...)
		}
		if i == 0 {
			b = bytes.Repeat([]byte("\x1b"), 1<<20)
		}
		var e hotEntry
		e.setKey(b)
		names := schema.HotKeyNames{Member: "m1", Keys: []schema.HotKeyName{{Topic: "t", Partition: 0, Hash: 1, Key: e.text()}}}
		if err := names.Check(); err != nil {
			t.Fatalf("key %q: its text %q is refused: %v", b[:min(len(b), 80)], e.text(), err)
		}
	}
}

func TestRangeLoadBucket(t *testing.T) {
	for _, tc := range []struct {
		r    ledger.HashRange
		h    uint32
		want int
	}{
		{ledger.Full, 0, 0},
		{ledger.Full, 1<<28 - 1, 0},
		{ledger.Full, 1 << 28, 1},
		{ledger.Full, math.MaxUint32, assign.LoadBuckets - 1},
		// 100 hashes: parts of 6, the last holding 10.
		{ledger.HashRange{Lo: 1000, Hi: 1100}, 1000, 0},
		{ledger.HashRange{Lo: 1000, Hi: 1100}, 1089, 14},
		{ledger.HashRange{Lo: 1000, Hi: 1100}, 1090, 15},
		{ledger.HashRange{Lo: 1000, Hi: 1100}, 1099, 15},
		// Narrower than LoadBuckets: all in the last part.
		{ledger.HashRange{Lo: 5, Hi: 6}, 5, assign.LoadBuckets - 1},
	} {
		l := newRangeLoad(tc.r, time.Time{})
		if got := l.bucket(tc.h); got != tc.want {
			t.Errorf("bucket of %d in %v = %d, want %d", tc.h, tc.r, got, tc.want)
		}
	}
}

// testOwned is a range of the table, as reconcile makes one.
func testOwned(t *testing.T, topic string, partition int32, r ledger.HashRange) *owned {
	t.Helper()
	st, err := ledger.NewState(r, ledger.Entry{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &owned{st: st, rs: schema.RangeState{Record: schema.RangeRecord{Topic: topic, Partition: partition, Lo: r.Lo, Hi: r.Hi, State: schema.StateActive}}}
}

// TestLoadTableReport: rates are over each range's own window, buckets and
// hot keys add up to what was measured, ranges come sorted, a range
// acquired mid-window is measured from its first record and kept open
// into the next window, and a range no longer owned is forgotten.
func TestLoadTableReport(t *testing.T) {
	t0 := time.Unix(1000, 0)
	lt := newLoadTable(t0)
	half := ledger.HashSpace / 2
	a := testOwned(t, "t", 1, ledger.HashRange{Lo: 0, Hi: half})
	b := testOwned(t, "t", 0, ledger.HashRange{Lo: half, Hi: ledger.HashSpace})
	c := testOwned(t, "s", 0, ledger.Full)
	hot := uint32(12345)
	for range 30 {
		lt.add(a, hot, []byte("hot-key"), 100*time.Millisecond, true, t0)
	}
	lt.add(a, uint32(half-1), []byte("other"), 500*time.Millisecond, false, t0) // abandoned: busy, not a record
	lt.add(a, 77, []byte("noise"), 10*time.Millisecond, true, t0)               // listed for the leader, too little to show
	// b's first record was dispatched 8 s into the 10 s window.
	lt.add(b, uint32(half), []byte("b-key"), time.Second, true, t0.Add(8*time.Second))

	r, names := lt.report(t0.Add(10*time.Second), []*owned{a, b, c}, func(w *owned) int64 {
		if w == a {
			return 7
		}
		return 0
	})
	if r.Window != 10 || len(r.Ranges) != 3 {
		t.Fatalf("report %+v: want a 10 s window and 3 ranges", r)
	}
	if r.Ranges[0].Topic != "s" || r.Ranges[1].Partition != 0 || r.Ranges[2].Partition != 1 {
		t.Fatalf("ranges %+v: want s/0, t/0, t/1", r.Ranges)
	}
	ra, rb, rc := r.Ranges[2], r.Ranges[1], r.Ranges[0]
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	if !near(ra.RecordsPerSec, 3.1) || !near(ra.BusyPerSec, 0.351) || ra.Backlog != 7 || ra.Lo != 0 || ra.Hi != half {
		t.Errorf("range a %+v: want 3.1 records/s, 0.351 busy/s, backlog 7, [0, 2^31)", ra)
	}
	if len(ra.Buckets) != assign.LoadBuckets || !near(ra.Buckets[0], 0.301) || !near(ra.Buckets[assign.LoadBuckets-1], 0.05) {
		t.Errorf("range a buckets %v: want 0.301 in the first part, 0.05 in the last", ra.Buckets)
	}
	if len(ra.Hot) != 3 || ra.Hot[0].Hash != uint64(hot) || !near(ra.Hot[0].BusyPerSec, 0.3) || ra.Hot[2].Hash != 77 {
		t.Errorf("range a hot %+v: want %d first at 0.3 busy/s, the noise key's 77 last", ra.Hot, hot)
	}
	// The notable hot keys by name (not the noise key, under 1% of the
	// range and a tenth of a worker): for Status in each range, with
	// their share of the range's busy time, and for etcd in key order.
	if len(a.hot) != 2 || a.hot[0].Key != "hot-key" || !near(a.hot[0].BusyPerSec, 0.3) || !near(a.hot[0].Share, 0.3/0.351) || a.hot[1].Key != "other" {
		t.Errorf("range a's hot keys %+v: want hot-key at 0.3 busy/s, 300/351 of the range, then other", a.hot)
	}
	if len(c.hot) != 0 {
		t.Errorf("idle range c's hot keys %+v: want none", c.hot)
	}
	wantNames := []schema.HotKeyName{
		{Topic: "t", Partition: 0, Hash: uint64(half), Key: "b-key"},
		{Topic: "t", Partition: 1, Hash: uint64(hot), Key: "hot-key"},
		{Topic: "t", Partition: 1, Hash: uint64(half - 1), Key: "other"},
	}
	if !slices.Equal(names.Keys, wantNames) {
		t.Errorf("hot key names %+v, want %+v", names.Keys, wantNames)
	}
	if !near(rb.RecordsPerSec, 0.5) || !near(rb.BusyPerSec, 0.5) {
		t.Errorf("range b %+v: want its rates over the 2 s since its first record", rb)
	}
	if rc.RecordsPerSec != 0 || rc.BusyPerSec != 0 || rc.Buckets != nil || rc.Hot != nil {
		t.Errorf("idle range c %+v: want zero rates, no buckets, no hot keys", rc)
	}

	// Next window: a's measurement starts again; b's, open for only 2 s
	// of 10, goes on; c is no longer owned.
	lt.add(b, uint32(half), []byte("b-key"), time.Second, true, t0)
	r, _ = lt.report(t0.Add(20*time.Second), []*owned{a, b}, func(*owned) int64 { return 0 })
	if len(r.Ranges) != 2 || r.Window != 10 {
		t.Fatalf("second report %+v: want 2 ranges over 10 s", r)
	}
	if r.Ranges[1].RecordsPerSec != 0 || r.Ranges[1].Hot != nil {
		t.Errorf("range a %+v: want nothing measured in the second window", r.Ranges[1])
	}
	if !near(r.Ranges[0].RecordsPerSec, 2.0/12) || !near(r.Ranges[0].BusyPerSec, 2.0/12) {
		t.Errorf("range b %+v: want 2 records and 2 s busy over the 12 s since its first record", r.Ranges[0])
	}
	if a.hot != nil {
		t.Errorf("range a's hot keys %+v after a window without records: want none", a.hot)
	}
	if _, kept := lt.byRange[c]; kept {
		t.Error("range c is no longer owned: its load is still kept")
	}
}

// TestLoadTableNamesBounded: a member whose ranges list more hot keys
// than a names value holds keeps the busiest, in key order.
func TestLoadTableNamesBounded(t *testing.T) {
	t0 := time.Unix(1000, 0)
	lt := newLoadTable(t0)
	const parts = 300 // 1,200 hot keys
	var ranges []*owned
	for i := range parts {
		w := testOwned(t, "t", int32(i), ledger.Full)
		ranges = append(ranges, w)
		for j := range assign.MaxHotKeys {
			// Busier with i and j: the least busy are partitions 0 up.
			lt.add(w, uint32(j+1), fmt.Appendf(nil, "k-%d-%d", i, j), time.Duration(i*assign.MaxHotKeys+j+1)*time.Millisecond, true, t0)
		}
	}
	_, names := lt.report(t0.Add(10*time.Second), ranges, func(*owned) int64 { return 0 })
	if len(names.Keys) != schema.MaxHotKeyNames {
		t.Fatalf("%d names, want %d", len(names.Keys), schema.MaxHotKeyNames)
	}
	dropped := parts*assign.MaxHotKeys - schema.MaxHotKeyNames
	first := int32(dropped / assign.MaxHotKeys)
	if names.Keys[0].Partition != first || names.Keys[len(names.Keys)-1].Partition != parts-1 {
		t.Fatalf("names run from partition %d to %d, want %d (the least busy %d left out) to %d", names.Keys[0].Partition, names.Keys[len(names.Keys)-1].Partition, first, dropped, parts-1)
	}
	names.Member = "m1"
	if err := names.Check(); err != nil {
		t.Fatalf("names refused: %v", err)
	}
	if !slices.IsSortedFunc(names.Keys, func(a, b schema.HotKeyName) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Hash, b.Hash))
	}) {
		t.Fatal("names not in key order")
	}
}

// BenchmarkLoadAdd is the per-record cost of the load accounting (under
// the pipeline's lock, in finish): keys drawn from Zipf s=1.1 over 10,000
// keys, so the summary both hits and replaces.
//
//	go test -run '^$' -bench BenchmarkLoadAdd ./consumer/
func BenchmarkLoadAdd(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	z := rand.NewZipf(rng, 1.1, 1, 9999)
	hashes := make([]uint32, 4096)
	keys := make([][]byte, len(hashes))
	for i := range hashes {
		keys[i] = []byte(fmt.Sprintf("key-%d", z.Uint64()))
		hashes[i] = ledger.Hash(keys[i], 0)
	}
	w := &owned{}
	st, err := ledger.NewState(ledger.Full, ledger.Entry{}, 0)
	if err != nil {
		b.Fatal(err)
	}
	w.st = st
	lt := newLoadTable(time.Now())
	since := time.Now()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lt.add(w, hashes[i%len(hashes)], keys[i%len(keys)], time.Millisecond, true, since)
	}
}

// TestLoadConfig: Balance and LoadReportInterval default to coord's, reach
// the coordination config, and a bad value is refused with ErrConfig.
func TestLoadConfig(t *testing.T) {
	cfg := DefaultConfig()
	cc := coord.DefaultConfig()
	if cfg.Balance != cc.Balance || cfg.LoadReportInterval != cc.LoadReportInterval {
		t.Fatalf("defaults %q %s, want coord's %q %s", cfg.Balance, cfg.LoadReportInterval, cc.Balance, cc.LoadReportInterval)
	}
	cfg.Balance, cfg.LoadReportInterval = coord.BalanceWidth, 700*time.Millisecond
	if got := cfg.coordConfig(nil); got.Balance != coord.BalanceWidth || got.LoadReportInterval != 700*time.Millisecond {
		t.Fatalf("coord config %q %s, want width 700ms", got.Balance, got.LoadReportInterval)
	}
	base := DefaultConfig()
	base.Group, base.Topics = "g", []string{"t"}
	base.Kafka["bootstrap.servers"] = "localhost:9092"
	base.Handler = func(context.Context, *kafka.Message) error { return nil }
	if err := base.Validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	for name, set := range map[string]func(*Config){
		"balance":  func(c *Config) { c.Balance = "hash" },
		"interval": func(c *Config) { c.LoadReportInterval = 10 * time.Millisecond },
	} {
		c := base
		set(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Validate = %v, want ErrConfig", name, err)
		}
	}
}
