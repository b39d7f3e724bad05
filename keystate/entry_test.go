package keystate_test

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/keyshare/keyshare/keystate"
)

func hdrs(kv ...string) []keystate.Header {
	var hs []keystate.Header
	for i := 0; i+1 < len(kv); i += 2 {
		hs = append(hs, keystate.Header{Key: kv[i], Value: []byte(kv[i+1])})
	}
	return hs
}

// good are the headers of a change at offset 41 under token 7.
var good = []string{keystate.HeaderVersion, "1", keystate.HeaderApplied, "41", keystate.HeaderFence, "7"}

func with(kv ...string) []string { return append(append([]string{}, good...), kv...) }

func without(name string) []string {
	var out []string
	for i := 0; i < len(good); i += 2 {
		if good[i] != name {
			out = append(out, good[i], good[i+1])
		}
	}
	return out
}

func replaced(name, value string) []string {
	out := append([]string{}, good...)
	for i := 0; i < len(out); i += 2 {
		if out[i] == name {
			out[i+1] = value
		}
	}
	return out
}

func TestHeaders(t *testing.T) {
	got := keystate.Headers(keystate.Entry{Key: []byte("k"), Value: []byte("v"), Applied: 41, Fence: 7})
	want := hdrs(good...)
	if len(got) != len(want) {
		t.Fatalf("Headers = %v, want %v", got, want)
	}
	for i := range got {
		if got[i].Key != want[i].Key || !bytes.Equal(got[i].Value, want[i].Value) {
			t.Fatalf("Headers = %q, want %q", got, want)
		}
	}
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name      string
		key       []byte
		value     []byte
		null      bool
		headers   []string
		want      keystate.Entry
		wantField string // "" for success
		wantErr   string
	}{
		{name: "a change", key: []byte("k"), value: []byte("v"), headers: good,
			want: keystate.Entry{Key: []byte("k"), Value: []byte("v"), Applied: 41, Fence: 7}},
		{name: "a tombstone", key: []byte("k"), null: true, headers: good,
			want: keystate.Entry{Key: []byte("k"), Deleted: true, Applied: 41, Fence: 7}},
		{name: "an empty value is a value", key: []byte("k"), value: []byte{}, headers: good,
			want: keystate.Entry{Key: []byte("k"), Value: []byte{}, Applied: 41, Fence: 7}},
		{name: "no value, not null, is an empty value", key: []byte("k"), headers: good,
			want: keystate.Entry{Key: []byte("k"), Value: []byte{}, Applied: 41, Fence: 7}},
		{name: "an empty key is a key", key: []byte{}, value: []byte("v"), headers: good,
			want: keystate.Entry{Key: []byte{}, Value: []byte("v"), Applied: 41, Fence: 7}},
		{name: "headers in any order, others ignored", key: []byte("k"), value: []byte("v"),
			headers: []string{"traceparent", "00-x", keystate.HeaderFence, "7", keystate.HeaderApplied, "41", "keyshare.fence", "3", keystate.HeaderVersion, "1"},
			want:    keystate.Entry{Key: []byte("k"), Value: []byte("v"), Applied: 41, Fence: 7}},
		{name: "offset and token zero", key: []byte("k"), value: []byte("v"),
			headers: []string{keystate.HeaderVersion, "1", keystate.HeaderApplied, "0", keystate.HeaderFence, "0"},
			want:    keystate.Entry{Key: []byte("k"), Value: []byte("v")}},
		{name: "largest offset", key: []byte("k"), value: []byte("v"), headers: replaced(keystate.HeaderApplied, "9223372036854775807"),
			want: keystate.Entry{Key: []byte("k"), Value: []byte("v"), Applied: 1<<63 - 1, Fence: 7}},

		{name: "null key", value: []byte("v"), headers: good, wantField: "key", wantErr: "no key"},
		{name: "no headers", key: []byte("k"), value: []byte("v"), wantField: keystate.HeaderVersion, wantErr: "header missing"},
		{name: "no version", key: []byte("k"), headers: without(keystate.HeaderVersion), wantField: keystate.HeaderVersion, wantErr: "header missing"},
		{name: "no applied", key: []byte("k"), headers: without(keystate.HeaderApplied), wantField: keystate.HeaderApplied, wantErr: "header missing"},
		{name: "no fence", key: []byte("k"), headers: without(keystate.HeaderFence), wantField: keystate.HeaderFence, wantErr: "header missing"},
		{name: "version repeated", key: []byte("k"), headers: with(keystate.HeaderVersion, "1"), wantField: keystate.HeaderVersion, wantErr: "repeated"},
		{name: "applied repeated", key: []byte("k"), headers: with(keystate.HeaderApplied, "41"), wantField: keystate.HeaderApplied, wantErr: "repeated"},
		{name: "fence repeated", key: []byte("k"), headers: with(keystate.HeaderFence, "8"), wantField: keystate.HeaderFence, wantErr: "repeated"},
		{name: "future version", key: []byte("k"), headers: replaced(keystate.HeaderVersion, "2"), wantField: keystate.HeaderVersion, wantErr: "format version 2, this build reads version 1"},
		{name: "version zero", key: []byte("k"), headers: replaced(keystate.HeaderVersion, "0"), wantField: keystate.HeaderVersion, wantErr: "format version 0"},
		{name: "version not a number", key: []byte("k"), headers: replaced(keystate.HeaderVersion, "v1"), wantField: keystate.HeaderVersion, wantErr: "not a decimal"},
		{name: "unknown header of ours", key: []byte("k"), headers: with("keyshare.state.owner", "m1"), wantField: "keyshare.state.owner", wantErr: "not written by format version 1"},
		{name: "unknown header of ours, other case", key: []byte("k"), headers: with("Keyshare.State.Fence", "7"), wantField: "Keyshare.State.Fence", wantErr: "not written by format version 1"},
		{name: "negative offset", key: []byte("k"), headers: replaced(keystate.HeaderApplied, "-1"), wantField: keystate.HeaderApplied, wantErr: "negative"},
		{name: "negative fence", key: []byte("k"), headers: replaced(keystate.HeaderFence, "-7"), wantField: keystate.HeaderFence, wantErr: "negative"},
		{name: "empty offset", key: []byte("k"), headers: replaced(keystate.HeaderApplied, ""), wantField: keystate.HeaderApplied, wantErr: "not a decimal"},
		{name: "offset overflow", key: []byte("k"), headers: replaced(keystate.HeaderApplied, "9223372036854775808"), wantField: keystate.HeaderApplied, wantErr: "not a decimal"},
		{name: "offset with plus", key: []byte("k"), headers: replaced(keystate.HeaderApplied, "+41"), wantField: keystate.HeaderApplied, wantErr: "canonical"},
		{name: "offset with leading zero", key: []byte("k"), headers: replaced(keystate.HeaderApplied, "041"), wantField: keystate.HeaderApplied, wantErr: "canonical"},
		{name: "minus zero", key: []byte("k"), headers: replaced(keystate.HeaderFence, "-0"), wantField: keystate.HeaderFence, wantErr: "canonical"},
		{name: "offset with space", key: []byte("k"), headers: replaced(keystate.HeaderApplied, "41 "), wantField: keystate.HeaderApplied, wantErr: "not a decimal"},
		{name: "tombstone with a value", key: []byte("k"), value: []byte("v"), null: true, headers: good, wantField: "value", wantErr: "tombstone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := keystate.Decode(tc.key, tc.value, tc.null, hdrs(tc.headers...))
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if !sameEntry(got, tc.want) {
					t.Fatalf("Decode = %+v, want %+v", got, tc.want)
				}
				return
			}
			var de *keystate.DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("Decode = %+v, %v; want a *DecodeError", got, err)
			}
			if de.Field != tc.wantField || !strings.Contains(de.Problem, tc.wantErr) {
				t.Fatalf("error %q: field %q, problem %q; want field %q, problem containing %q", err, de.Field, de.Problem, tc.wantField, tc.wantErr)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.wantField) || (tc.key != nil && !strings.Contains(msg, strconv.Quote(string(tc.key)))) {
				t.Errorf("error %q does not name the field %q and the key %q", msg, tc.wantField, tc.key)
			}
			if !strings.Contains(err.Error(), "check the changelog topic") {
				t.Errorf("error %q does not say what to do", err)
			}
		})
	}
}

// TestDecodeErrorQuotesValues checks that a header value of control bytes
// reaches an operator's terminal quoted.
func TestDecodeErrorQuotesValues(t *testing.T) {
	_, err := keystate.Decode([]byte("k\x1b[2J"), nil, false, hdrs(replaced(keystate.HeaderApplied, "\x1b]0;x\a")...))
	if err == nil {
		t.Fatal("Decode accepted a control-byte offset")
	}
	if strings.ContainsAny(err.Error(), "\x1b\a") {
		t.Fatalf("error %q holds raw control bytes", err)
	}
}

func sameEntry(a, b keystate.Entry) bool {
	return bytes.Equal(a.Key, b.Key) && (a.Key == nil) == (b.Key == nil) &&
		bytes.Equal(a.Value, b.Value) && (a.Value == nil) == (b.Value == nil) &&
		a.Deleted == b.Deleted && a.Applied == b.Applied && a.Fence == b.Fence
}

// FuzzDecode feeds Decode arbitrary records, headers given one per line as
// name=value: it must never panic, must refuse with a *DecodeError, and
// what it accepts must carry each of its headers once, in canonical form,
// and come back unchanged from Headers → Decode.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("k"), []byte("v"), false, []byte("keyshare.state.v=1\nkeyshare.state.applied=41\nkeyshare.state.fence=7"))
	f.Add([]byte("k"), []byte(nil), true, []byte("keyshare.state.fence=7\nkeyshare.state.v=1\nkeyshare.state.applied=0"))
	f.Add([]byte("k"), []byte("v"), false, []byte("keyshare.state.v=1\nkeyshare.state.v=1\nkeyshare.state.applied=41\nkeyshare.state.fence=7"))
	f.Add([]byte("k"), []byte("v"), false, []byte("keyshare.state.v=2\nkeyshare.state.applied=41\nkeyshare.state.fence=7"))
	f.Add([]byte("k"), []byte("v"), false, []byte("keyshare.state.v=1\nkeyshare.state.applied=-1\nkeyshare.state.fence=07\nx=y"))
	f.Add([]byte{}, []byte{}, false, []byte("keyshare.state.v=1\nkeyshare.state.applied=9223372036854775807\nkeyshare.state.fence=1\nkeyshare.state.x="))
	f.Fuzz(func(t *testing.T, key, value []byte, null bool, headerLines []byte) {
		var hs []keystate.Header
		for _, line := range bytes.Split(headerLines, []byte("\n")) {
			name, v, _ := bytes.Cut(line, []byte("="))
			hs = append(hs, keystate.Header{Key: string(name), Value: v})
		}
		e, err := keystate.Decode(key, value, null, hs)
		if err != nil {
			var de *keystate.DecodeError
			if !errors.As(err, &de) || de.Field == "" || de.Problem == "" {
				t.Fatalf("Decode error %v (%T) does not name a field and a problem", err, err)
			}
			return
		}
		for _, name := range []string{keystate.HeaderVersion, keystate.HeaderApplied, keystate.HeaderFence} {
			n := 0
			for _, h := range hs {
				if h.Key == name {
					n++
					if v, err := strconv.ParseInt(string(h.Value), 10, 64); err != nil || v < 0 || strconv.FormatInt(v, 10) != string(h.Value) {
						t.Fatalf("Decode accepted header %s=%q", name, h.Value)
					}
				}
			}
			if n != 1 {
				t.Fatalf("Decode accepted %d headers %s", n, name)
			}
		}
		if e.Deleted != null || (null && e.Value != nil) || e.Applied < 0 || e.Fence < 0 {
			t.Fatalf("Decode accepted %+v from value %q (null %v)", e, value, null)
		}
		back := e.Value
		if e.Deleted {
			back = nil
		}
		e2, err := keystate.Decode(e.Key, back, e.Deleted, keystate.Headers(e))
		if err != nil {
			t.Fatalf("Decode(Headers(%+v)): %v", e, err)
		}
		if !bytes.Equal(e2.Key, e.Key) || !bytes.Equal(e2.Value, e.Value) || e2.Deleted != e.Deleted || e2.Applied != e.Applied || e2.Fence != e.Fence {
			t.Fatalf("Decode(Headers(%+v)) = %+v", e, e2)
		}
	})
}

// FuzzHeadersRoundTrip checks that every entry with a non-negative offset
// and token survives Headers → Decode, and that a negative one is refused.
func FuzzHeadersRoundTrip(f *testing.F) {
	f.Add([]byte("k"), []byte("v"), false, int64(41), int64(7))
	f.Add([]byte{}, []byte(nil), true, int64(0), int64(1<<63-1))
	f.Add([]byte("k"), []byte("v"), false, int64(-1), int64(7))
	f.Fuzz(func(t *testing.T, key, value []byte, deleted bool, applied, fence int64) {
		if deleted {
			value = nil
		}
		e := keystate.Entry{Key: nonNilBytes(key), Value: value, Deleted: deleted, Applied: applied, Fence: fence}
		got, err := keystate.Decode(e.Key, value, deleted, keystate.Headers(e))
		if applied < 0 || fence < 0 {
			if err == nil {
				t.Fatalf("Decode accepted %+v", got)
			}
			return
		}
		if err != nil {
			t.Fatalf("Decode(Headers(%+v)): %v", e, err)
		}
		if !bytes.Equal(got.Key, e.Key) || !bytes.Equal(got.Value, value) || got.Deleted != deleted || got.Applied != applied || got.Fence != fence {
			t.Fatalf("Decode(Headers(%+v)) = %+v", e, got)
		}
	})
}

func nonNilBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
