package schema

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/assign"
)

var recSchema = Group{Prefix: "/keyshare", Name: "g"}.Keys()
var recGroup = Group{Prefix: "/keyshare", Name: "g"}

// checkBadValue checks that err is a *BadValueError for key whose problem
// mentions want.
func checkBadValue(t *testing.T, err error, key, want string) {
	t.Helper()
	var bad *BadValueError
	if !errors.As(err, &bad) {
		t.Fatalf("err = %v (%T), want a *BadValueError", err, err)
	}
	if bad.Key != key {
		t.Errorf("BadValueError.Key = %q, want %q", bad.Key, key)
	}
	if !strings.Contains(err.Error(), key) {
		t.Errorf("message %q does not name the key %q", err, key)
	}
	if !strings.Contains(bad.Problem, want) {
		t.Errorf("problem %q does not say %q", bad.Problem, want)
	}
}

func TestRecordDecodeRange(t *testing.T) {
	t.Parallel()
	key := recSchema.Range("orders", 3, 100)
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	good := RangeRecord{V: 1, Topic: "orders", Partition: 3, Lo: 100, Hi: 200, Owner: "m1", State: StateRevoking, Target: "m2", Gen: 4, Since: since, Reset: 17}

	t.Run("round trip", func(t *testing.T) {
		got, err := DecodeRange(recGroup, key, []byte(Encode(good)), 0)
		if err != nil {
			t.Fatal(err)
		}
		if got != good {
			t.Fatalf("got %+v, want %+v", got, good)
		}
	})
	for _, state := range []string{StateActive, StateRevoking, StateReleased} {
		t.Run("state "+state, func(t *testing.T) {
			r := good
			r.State = state
			if _, err := DecodeRange(recGroup, key, []byte(Encode(r)), 0); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("whole hash space", func(t *testing.T) {
		r := good
		r.Lo, r.Hi = 0, 1<<32
		if _, err := DecodeRange(recGroup, recSchema.Range("orders", 3, 0), []byte(Encode(r)), 0); err != nil {
			t.Fatal(err)
		}
	})

	with := func(f func(r *RangeRecord)) string {
		r := good
		f(&r)
		return Encode(r)
	}
	base := Encode(good)
	tests := []struct {
		name, key, value, want string
	}{
		{"garbage", key, "not json", "invalid character"},
		{"empty", key, "", "EOF"},
		{"null", key, "null", "format version 0"},
		{"array", key, "[]", "cannot unmarshal"},
		{"truncated", key, base[:len(base)-1], "unexpected EOF"},
		{"trailing value", key, base + ` {}`, "trailing data"},
		{"trailing brace", key, base + `}`, "trailing"},
		{"trailing bracket", key, base + `]`, "trailing"},
		{"unknown field", key, strings.Replace(base, `{`, `{"extra":1,`, 1), `unknown field "extra"`},
		{"field name in other case", key, strings.Replace(base, `"owner"`, `"OWNER"`, 1), "unknown field"},
		{"repeated field", key, strings.Replace(base, `{`, `{"owner":"m9",`, 1), "given twice"},
		{"wrong type", key, strings.Replace(base, `"lo":100`, `"lo":"100"`, 1), "cannot unmarshal"},
		{"newer version", key, with(func(r *RangeRecord) { r.V = 2 }), "format version 2, this build reads version 1"},
		{"no version", key, strings.Replace(base, `"v":1,`, ``, 1), "format version 0"},
		{"negative lo", key, strings.Replace(base, `"lo":100`, `"lo":-100`, 1), "cannot unmarshal"},
		{"negative hi", key, strings.Replace(base, `"hi":200`, `"hi":-1`, 1), "cannot unmarshal"},
		{"negative generation", key, with(func(r *RangeRecord) { r.Gen = -1 }), "generation -1 is outside"},
		{"negative reset epoch", key, with(func(r *RangeRecord) { r.Reset = -2 }), "negative reset epoch -2"},
		{"negative partition", key, with(func(r *RangeRecord) { r.Partition = -3 }), "the key says orders/3"},
		{"other topic", key, with(func(r *RangeRecord) { r.Topic = "payments" }), "value names payments/3 from hash 100, the key says orders/3 from 100"},
		{"other partition", key, with(func(r *RangeRecord) { r.Partition = 4 }), "value names orders/4"},
		{"other lo", key, with(func(r *RangeRecord) { r.Lo = 99 }), "from hash 99, the key says orders/3 from 100"},
		{"empty range", key, with(func(r *RangeRecord) { r.Hi = 100 }), "want lo < hi"},
		{"range past the hash space", key, with(func(r *RangeRecord) { r.Hi = 1<<32 + 1 }), "want lo < hi <= 4294967296"},
		{"no owner", key, with(func(r *RangeRecord) { r.Owner = "" }), "owner is empty"},
		{"owner with slash", key, with(func(r *RangeRecord) { r.Owner = "a/b" }), "contains '/'"},
		{"unknown state", key, with(func(r *RangeRecord) { r.State = "paused" }), `unknown state "paused"`},
		{"no state", key, with(func(r *RangeRecord) { r.State = "" }), `unknown state ""`},
		{"key not under ranges", recSchema.LedgerEntry("orders", 3, 100), base, "is not under"},
		{"key without lo", recSchema.Ranges() + "orders/00003", base, "want"},
		{"key with bad partition", recSchema.Ranges() + "orders/x/0000000100", base, `bad partition "x"`},
		{"key with lo past the hash space", recSchema.Ranges() + "orders/00003/4294967296", base, "bad range start"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeRange(recGroup, tt.key, []byte(tt.value), 0)
			checkBadValue(t, err, tt.key, tt.want)
		})
	}
}

func TestRecordDecodeMember(t *testing.T) {
	t.Parallel()
	key := recSchema.Member("m1")
	good := MemberInfo{V: 1, ID: "m1", Host: "h", PID: 7, Started: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Weight: 2}
	t.Run("round trip", func(t *testing.T) {
		got, err := DecodeMember(recGroup, key, []byte(Encode(good)))
		if err != nil {
			t.Fatal(err)
		}
		if got != good {
			t.Fatalf("got %+v, want %+v", got, good)
		}
	})
	with := func(f func(m *MemberInfo)) string {
		m := good
		f(&m)
		return Encode(m)
	}
	base := Encode(good)
	tests := []struct {
		name, key, value, want string
	}{
		{"garbage", key, "{", "EOF"},
		{"unknown field", key, strings.Replace(base, `{`, `{"zone":"x",`, 1), `unknown field "zone"`},
		{"trailing value", key, base + `1`, "trailing data"},
		{"newer version", key, with(func(m *MemberInfo) { m.V = 2 }), "format version 2"},
		{"other id", key, with(func(m *MemberInfo) { m.ID = "m2" }), `value names member "m2"`},
		{"no id", key, with(func(m *MemberInfo) { m.ID = "" }), `value names member ""`},
		{"key of another group", Group{Prefix: "/keyshare", Name: "h"}.Keys().Member("m1"), base, `value names member "m1"`},
		{"zero weight", key, with(func(m *MemberInfo) { m.Weight = 0 }), "weight 0 must be positive"},
		{"negative weight", key, with(func(m *MemberInfo) { m.Weight = -2 }), "weight -2 must be positive"},
		{"weight above the limit", key, with(func(m *MemberInfo) { m.Weight = assign.MaxWeight + 1 }), "weight 1000001 is above the limit 1000000"},
		{"absurd weight", key, with(func(m *MemberInfo) { m.Weight = math.MaxInt64 }), "weight 9223372036854775807 is above the limit 1000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeMember(recGroup, tt.key, []byte(tt.value))
			checkBadValue(t, err, tt.key, tt.want)
		})
	}
}

func TestRecordDecodeGeneration(t *testing.T) {
	t.Parallel()
	key := recSchema.Generation()
	good := GenerationRecord{V: 1, Generation: 9, Leader: "m1", At: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	t.Run("round trip", func(t *testing.T) {
		got, err := DecodeGeneration(key, []byte(Encode(good)))
		if err != nil {
			t.Fatal(err)
		}
		if got != good {
			t.Fatalf("got %+v, want %+v", got, good)
		}
	})
	base := Encode(good)
	tests := []struct{ name, value, want string }{
		{"garbage", "gen 9", "invalid character"},
		{"unknown field", strings.Replace(base, `{`, `{"term":1,`, 1), `unknown field "term"`},
		{"newer version", strings.Replace(base, `"v":1`, `"v":3`, 1), "format version 3"},
		{"negative generation", strings.Replace(base, `"generation":9`, `"generation":-9`, 1), "generation -9 is outside"},
		{"fractional generation", strings.Replace(base, `"generation":9`, `"generation":9.5`, 1), "cannot unmarshal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeGeneration(key, []byte(tt.value))
			checkBadValue(t, err, key, tt.want)
		})
	}
}

func TestRecordDecodeCommit(t *testing.T) {
	t.Parallel()
	key := recSchema.Commit("orders", 3)
	good := CommitRecord{V: 1, Offset: 42, Leader: "m1", At: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	t.Run("round trip", func(t *testing.T) {
		got, err := DecodeCommit(key, []byte(Encode(good)), 0)
		if err != nil {
			t.Fatal(err)
		}
		if got != good {
			t.Fatalf("got %+v, want %+v", got, good)
		}
	})
	t.Run("offset zero", func(t *testing.T) {
		c := good
		c.Offset = 0
		if _, err := DecodeCommit(key, []byte(Encode(c)), 0); err != nil {
			t.Fatal(err)
		}
	})
	base := Encode(good)
	tests := []struct{ name, value, want string }{
		{"garbage", "\x00", "invalid character"},
		{"unknown field", strings.Replace(base, `{`, `{"epoch":1,`, 1), `unknown field "epoch"`},
		{"newer version", strings.Replace(base, `"v":1`, `"v":2`, 1), "format version 2"},
		{"negative offset", strings.Replace(base, `"offset":42`, `"offset":-1`, 1), "negative offset -1"},
		{"offset as string", strings.Replace(base, `"offset":42`, `"offset":"42"`, 1), "cannot unmarshal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeCommit(key, []byte(tt.value), 0)
			checkBadValue(t, err, key, tt.want)
		})
	}
}

// TestRecordNumbersBounded: numbers that decode cleanly but are absurd are
// refused as damaged, before arithmetic on them overflows (a generation
// plus one, a drain budget in nanoseconds) or a planted epoch makes every
// later reset look old.
func TestRecordNumbersBounded(t *testing.T) {
	t.Parallel()
	const maxInt64 = math.MaxInt64
	rkey := recSchema.Range("orders", 3, 100)
	rng := RangeRecord{V: 1, Topic: "orders", Partition: 3, Lo: 100, Hi: 200, Owner: "m1", State: StateRevoking, Gen: 7, DrainMs: 30000, Reset: 40}
	with := func(f func(r *RangeRecord)) []byte {
		r := rng
		f(&r)
		return []byte(Encode(r))
	}
	ckey := recSchema.Commit("orders", 3)
	commit := func(reset int64) []byte {
		return []byte(Encode(CommitRecord{V: 1, Offset: 5, Leader: "m1", Reset: reset}))
	}
	gkey := recSchema.Generation()
	tests := []struct {
		name, key string
		decode    func() error
		want      string
	}{
		{"range generation MaxInt64", rkey, func() error {
			_, err := DecodeRange(recGroup, rkey, with(func(r *RangeRecord) { r.Gen = maxInt64 }), 50)
			return err
		}, "generation 9223372036854775807 is outside 0..4611686018427387904"},
		{"range drain past an hour", rkey, func() error {
			_, err := DecodeRange(recGroup, rkey, with(func(r *RangeRecord) { r.DrainMs = 1 << 53 }), 50)
			return err
		}, "drain budget 9007199254740992ms is outside 0..3600000ms"},
		{"range reset epoch above its revision", rkey, func() error {
			_, err := DecodeRange(recGroup, rkey, with(func(r *RangeRecord) { r.Reset = maxInt64 }), 50)
			return err
		}, "reset epoch 9223372036854775807 is above the revision 50"},
		{"commit reset epoch above its revision", ckey, func() error { _, err := DecodeCommit(ckey, commit(maxInt64), 50); return err }, "reset epoch 9223372036854775807 is above the revision 50"},
		{"generation MaxInt64", gkey, func() error {
			_, err := DecodeGeneration(gkey, []byte(Encode(GenerationRecord{V: 1, Generation: maxInt64, Leader: "m1"})))
			return err
		}, "generation 9223372036854775807 is outside"},
		{"leave drain past an hour", "leaving/m1", func() error {
			_, err := DecodeLeave("leaving/m1", []byte(`{"v":1,"drain_ms":9223372036854775807}`))
			return err
		}, "drain budget 9223372036854775807ms must be positive and at most 3600000ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkBadValue(t, tt.decode(), tt.key, tt.want)
		})
	}
	// The largest values that are not absurd still decode.
	if _, err := DecodeRange(recGroup, rkey, with(func(r *RangeRecord) {
		r.Gen, r.DrainMs, r.Reset = maxGeneration, maxDrainMs, 50
	}), 50); err != nil {
		t.Errorf("range at the bounds: %v", err)
	}
	if _, err := DecodeCommit(ckey, commit(50), 50); err != nil {
		t.Errorf("commit with its epoch at its revision: %v", err)
	}
}

func TestRecordDecodeSubscription(t *testing.T) {
	t.Parallel()
	key := recSchema.Subscription("m1")
	got, err := DecodeSubscription(key, []byte(`{"v":1,"topics":["payments","orders","orders"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got.Topics, ",") != "orders,payments" {
		t.Errorf("topics %v, want them sorted and each once", got.Topics)
	}
	for value, want := range map[string]string{
		`{"v":1,"topics":[]}`:                  "no topics",
		`{"v":1}`:                              "no topics",
		`{"v":2,"topics":["orders"]}`:          "format version 2",
		`{"v":1,"topics":["orders"],"x":true}`: "unknown field",
	} {
		_, err := DecodeSubscription(key, []byte(value))
		checkBadValue(t, err, key, want)
	}
}
