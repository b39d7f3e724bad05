package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/schema"
)

// TestFencingCheck: the history check behind the "stale writes accepted"
// column flags exactly the writes a fenced member or a deposed leader must
// not get through, given a history written by hand.
func TestFencingCheck(t *testing.T) {
	e := newEnv(t, 1, 1, 1)
	ctx := t.Context()
	s := schema.Group{Prefix: "/keyshare", Name: group}.Keys()
	audits := map[string][]auditLine{}
	put := func(member string, kvs ...string) int64 {
		t.Helper()
		var ops []clientv3.Op
		for i := 0; i < len(kvs); i += 2 {
			ops = append(ops, clientv3.OpPut(kvs[i], kvs[i+1]))
		}
		resp, err := e.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			t.Fatal(err)
		}
		if member != "" {
			l := auditLine{Member: member, Rev: resp.Header.Revision}
			for i := 0; i < len(kvs); i += 2 {
				l.Puts = append(l.Puts, kvs[i])
			}
			audits[member] = append(audits[member], l)
		}
		return resp.Header.Revision
	}
	rangeRec := func(owner, st string) string {
		b, _ := json.Marshal(schema.RangeRecord{V: 1, Topic: topic, Partition: 0, Lo: 0, Hi: 1 << 32, Owner: owner, State: st, Gen: 1})
		return string(b)
	}
	rk, lk := s.Range(topic, 0, 0), s.LedgerEntry(topic, 0, 0)
	gen := func(g int) string { return fmt.Sprintf(`{"v":1,"generation":%d}`, g) }

	put("", s.Member("m1"), "{}", s.Member("m2"), "{}")
	put("", s.Election()+"/1", "m1")
	put("", s.Election()+"/2", "m2")                                          // m1 leads: its key is older
	put("m1", s.Generation(), gen(1), rk, rangeRec("m1", schema.StateActive)) // ok: the leader assigns
	put("m1", lk, "{}")                                                       // ok: the owner flushes
	badLedger := put("m2", lk, "{}")                                          // stale: m2 does not own the range
	put("m2", s.Generation(), gen(2))                                         // stale: m2 does not lead
	if _, err := e.cli.Delete(ctx, s.Election()+"/1"); err != nil {
		t.Fatal(err)
	}
	put("m2", s.Generation(), gen(3), rk, rangeRec("m2", schema.StateActive)) // ok: m2 leads now
	put("m1", s.Commits()+topic+"/00000", "{}")                               // stale: a deposed leader's commit
	put("m1", lk, "{}")                                                       // stale: m1 lost the range
	if _, err := e.cli.Delete(ctx, s.Member("m2")); err != nil {
		t.Fatal(err)
	}
	put("m2", lk, "{}") // stale: m2's registration is gone

	for m, ls := range audits {
		var b strings.Builder
		for _, l := range ls {
			j, _ := json.Marshal(l)
			b.Write(append(j, '\n'))
		}
		if err := os.WriteFile(filepath.Join(e.dir, m+".audit"), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := e.staleWrites(ctx)
	want := []string{
		fmt.Sprintf("m2 wrote %s at revision %d: the range is active by m1", lk, badLedger),
		"m2 wrote " + s.Generation(),
		"m1 wrote " + s.Commits(),
		"m1 wrote " + lk,
		"m2 wrote " + lk,
	}
	if len(got) != len(want) {
		t.Fatalf("stale writes:\n%s\nwant %d", strings.Join(got, "\n"), len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("stale write %d = %q, want it to start %q", i, got[i], want[i])
		}
	}
	t.Logf("flagged:\n%s", strings.Join(got, "\n"))
}
