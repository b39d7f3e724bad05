package schema

import (
	"encoding/json"
	"errors"
	"testing"
)

// Fuzz targets for the decoders of every value keyshare stores in etcd,
// beside ledger's FuzzDecode. For any bytes a decoder either refuses them
// with a *BadValueError naming the key, or accepts a value that survives
// encode → decode unchanged (as JSON, which is how it is stored); nothing
// panics. `make fuzz` runs each for FUZZTIME; `go test` runs the seeds, and
// TestDecoderSeeds checks that the valid seeds are accepted and the
// invalid ones refused, so no target fuzzes only refusals.

// fuzzRev is the revision a fuzzed value is said to have been written at.
const fuzzRev = 1000

// decoderCase is one decoder with its key and seeds.
type decoderCase struct {
	key            string
	valid, invalid []string
	// check decodes data and checks the round trip.
	check func(t *testing.T, data []byte) (accepted bool)
}

func decoderFor[T any](key string, decode func(key string, b []byte) (T, error), valid, invalid []string) decoderCase {
	return decoderCase{key: key, valid: valid, invalid: invalid, check: func(t *testing.T, data []byte) bool {
		return checkRoundTrip(t, key, data, func(b []byte) (T, error) { return decode(key, b) })
	}}
}

// checkRoundTrip is the property every target checks.
func checkRoundTrip[T any](t *testing.T, key string, data []byte, decode func([]byte) (T, error)) bool {
	t.Helper()
	v, err := decode(data)
	if err != nil {
		var bad *BadValueError
		if !errors.As(err, &bad) || bad.Key != key {
			t.Fatalf("decode(%q): error %v (%T) is not a *BadValueError for %q", data, err, err, key)
		}
		return false
	}
	enc, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("decode(%q) accepted %+v, which does not encode: %v", data, v, err)
	}
	v2, err := decode(enc)
	if err != nil {
		t.Fatalf("decode(%q) accepted %+v, but refuses it encoded (%s): %v", data, v, enc, err)
	}
	if enc2, _ := json.Marshal(v2); string(enc2) != string(enc) {
		t.Fatalf("round trip of %q changed the value: %s then %s", data, enc, enc2)
	}
	return true
}

// decodeHandoffPlan is decodeHandoff for a plan written at fuzzRev.
func decodeHandoffPlan(key string, b []byte) (HandoffPlan, error) {
	h, err := DecodeHandoff(key, b, fuzzRev)
	return h.Plan, err
}

var decoders = map[string]decoderCase{
	"subscription": decoderFor(recSchema.Subscription("m1"), func(key string, b []byte) (SubscriptionRecord, error) { return DecodeSubscription(key, b) },
		[]string{`{"v":1,"topics":["orders"]}`, `{"v":1,"topics":["payments","orders","orders"]}`},
		[]string{`{"v":1,"topics":[]}`}),
	"range": decoderFor(recSchema.Range("orders", 3, 100), func(key string, b []byte) (RangeRecord, error) { return decodeRange(recSchema, key, b, fuzzRev) },
		[]string{`{"v":1,"topic":"orders","partition":3,"lo":100,"hi":200,"owner":"m1","state":"active","gen":7,"since":"2026-01-02T03:04:05Z"}`, `{"v":1,"topic":"orders","partition":3,"lo":100,"hi":4294967296,"owner":"m1","state":"revoking","target":"m2","gen":7,"since":"2026-01-02T03:04:05+02:00","drain_ms":30000,"reset":40}`},
		[]string{`{"v":1,"topic":"orders","partition":3,"lo":100,"hi":200,"owner":"a/b","state":"active","gen":9223372036854775807,"since":"2026-01-02T03:04:05Z"}`}),
	"member": decoderFor(recSchema.Member("m1"), func(key string, b []byte) (MemberInfo, error) { return decodeMember(recSchema, key, b) },
		[]string{`{"v":1,"id":"m1","host":"h","pid":7,"started":"2026-01-02T03:04:05Z","weight":2}`, `{"v":1,"id":"m1","host":"h","pid":7,"started":"2026-01-02T03:04:05Z","weight":2,"leaving":true}`},
		[]string{`{"v":1,"id":"m2","host":"h","pid":7,"started":"2026-01-02T03:04:05Z","weight":0}`}),
	"commit": decoderFor(recSchema.Commit("orders", 3), func(key string, b []byte) (CommitRecord, error) { return DecodeCommit(key, b, fuzzRev) },
		[]string{`{"v":1,"offset":42,"leader":"m1","at":"2026-01-02T03:04:05Z"}`, `{"v":1,"offset":42,"leader":"m1","at":"2026-01-02T03:04:05Z","reset":999}`},
		[]string{`{"v":1,"offset":-1,"leader":"m1","at":"2026-01-02T03:04:05Z","reset":9223372036854775807}`}),
	"generation": decoderFor(recSchema.Generation(), func(key string, b []byte) (GenerationRecord, error) { return DecodeGeneration(key, b) },
		[]string{`{"v":1,"generation":9,"leader":"m1","at":"2026-01-02T03:04:05Z"}`},
		[]string{`{"v":1,"generation":-9,"leader":"m1","at":"2026-01-02T03:04:05Z"}`}),
	"load": decoderFor(recSchema.Load("m1"), func(key string, b []byte) (LoadReport, error) { return DecodeLoad(key, b) },
		[]string{`{"v":1,"member":"m1","at":"2026-01-02T03:04:05Z","window":5,"ranges":[{"topic":"orders","partition":3,"lo":0,"hi":4294967296,"records_per_sec":10.5,"busy_per_sec":0.25,"backlog":3}]}`},
		[]string{`{"v":1,"member":"m1","at":"2026-01-02T03:04:05Z","window":0,"ranges":[]}`}),
	"hotkeys": decoderFor(recSchema.HotKeys("m1"), func(key string, b []byte) (HotKeyNames, error) { return DecodeHotKeys(key, b) },
		[]string{`{"v":1,"member":"m1","keys":[]}`, `{"v":1,"member":"m1","keys":[{"topic":"orders","partition":3,"hash":4294967295,"key":"key-7"},{"topic":"orders","partition":4,"hash":7,"key":"\"\\x1b[2J\""},{"topic":"orders","partition":3,"hash":8,"key":""}]}`},
		[]string{`{"v":1,"member":"m1","keys":[{"topic":"orders","partition":3,"hash":7,"key":"\u001b[2J"}]}`, `{"v":1,"member":"m1","keys":[{"topic":"orders","partition":3,"hash":4294967296,"key":"k"}]}`, `{"v":1,"member":"m1","keys":[{"topic":"orders","partition":3,"hash":7,"key":"a"},{"topic":"orders","partition":3,"hash":7,"key":"b"}]}`, `{"v":1,"member":"m1","keys":[{"topic":"orders","partition":3,"hash":7,"key":"\u202e"}]}`, `{"v":1,"member":"m1","keys":[{"topic":"orders","partition":3,"hash":7,"key":"k"}],"busy":1}`}),
	"topic": decoderFor(recSchema.Topic("orders"), func(key string, b []byte) (TopicRecord, error) { return DecodeTopic(key, b) },
		[]string{`{"v":1,"topic":"orders","id":"AAAAAAAAAAAAAAAAAAAAAA","state":"active","at":"2026-01-02T03:04:05Z"}`},
		[]string{`{"v":1,"topic":"orders","id":"","state":"gone","at":"2026-01-02T03:04:05Z"}`}),
	"pause": decoderFor(recSchema.Paused(), func(key string, b []byte) (PauseRecord, error) { return DecodePause(key, b) },
		[]string{`{"v":1,"by":"ops@host","reason":"deploy","at":"2026-01-02T03:04:05Z"}`},
		[]string{`{"v":1,"by":"ops@host","at":"2026-01-02T03:04:05Z","extra":1}`}),
	"handoff": decoderFor(recSchema.Handoff("a"), func(key string, b []byte) (HandoffPlan, error) { return decodeHandoffPlan(key, b) },
		[]string{`{"v":1,"gen":3,"members":{"b":2},"ranges":[{"key":"k","rev":5,"to":"b"}]}`, `{"v":1,"gen":3,"members":{"b":2,"c":9},"ranges":[{"key":"k","rev":5,"to":"b"},{"key":"k2","rev":6,"to":"c"}]}`},
		[]string{`{"v":1,"gen":3,"members":{"b":2},"ranges":[{"key":"k","rev":5000,"to":"b"}]}`}),
	"leave": decoderFor(recSchema.Leaving("m1"), func(key string, b []byte) (LeaveRecord, error) { return DecodeLeave(key, b) },
		[]string{`{"v":1,"drain_ms":30000}`},
		[]string{`{"v":1,"drain_ms":0}`, `{"v":1,"drain_ms":9223372036854775807}`}),
	"stuck": decoderFor(recSchema.StuckRange("orders", 3, 100), func(key string, b []byte) (StuckRecord, error) { return DecodeStuck(key, b) },
		[]string{`{"v":1,"member":"m1","topic":"orders","partition":3,"lo":100,"offset":42,"key":"k","since":"2026-01-02T03:04:05Z","attempts":3,"error":"boom"}`},
		[]string{`{"v":1,"member":"m1","topic":"orders","partition":3,"lo":100,"offset":-42,"key":"k","since":"2026-01-02T03:04:05Z","attempts":3}`}),
	"keyop": decoderFor(recSchema.KeyOp("orders", 3, 3285391650, []byte("k")), func(key string, b []byte) (KeyOpRecord, error) { return DecodeKeyOp(recGroup, key, b) },
		[]string{`{"v":1,"op":"skip","topic":"orders","partition":3,"key":"aw==","hash":3285391650,"offset":42,"by":"ops@host","at":"2026-01-02T03:04:05Z"}`, `{"v":1,"op":"skip","topic":"orders","partition":3,"key":"aw==","hash":3285391650,"offset":42,"drop":true,"by":"ops@host","reason":"poison","at":"2026-01-02T03:04:05Z","refused":"no dead-letter topic"}`, `{"v":1,"op":"park","topic":"orders","partition":3,"key":"aw==","hash":3285391650,"offset":0,"park_topic":"orders.keyshare-parked","park_from":17,"by":"ops@host","at":"2026-01-02T03:04:05Z"}`, `{"v":1,"op":"unpark","topic":"orders","partition":3,"key":"aw==","hash":3285391650,"offset":0,"park_topic":"orders.keyshare-parked","park_from":17,"next":20,"by":"ops@host","at":"2026-01-02T03:04:05Z"}`, `{"v":1,"op":"replay","topic":"orders","partition":3,"key":"aw==","hash":3285391650,"offset":5,"next":9,"replay_to":40,"by":"ops@host","at":"2026-01-02T03:04:05Z"}`},
		[]string{`{"v":1,"op":"unpark","topic":"orders","partition":3,"key":"aw==","hash":3285391650,"offset":0,"park_topic":"orders.keyshare-parked","park_from":17,"next":3,"by":"ops@host","at":"2026-01-02T03:04:05Z"}`, `{"v":1,"op":"park","topic":"orders","partition":3,"key":"aw==","hash":3285391650,"offset":0,"park_topic":"orders.keyshare-parked","next":3,"by":"ops@host","at":"2026-01-02T03:04:05Z"}`, `{"v":1,"op":"park","topic":"orders","partition":3,"key":"aw==","hash":3285391650,"offset":42,"park_topic":"orders.keyshare-parked","by":"ops@host","at":"2026-01-02T03:04:05Z"}`, `{"v":1,"op":"park","topic":"orders","partition":3,"key":"aw==","hash":3285391650,"offset":0,"park_topic":"orders","by":"ops@host","at":"2026-01-02T03:04:05Z"}`, `{"v":1,"op":"skip","topic":"orders","partition":3,"key":"aw==","hash":3285391650,"offset":4,"park_topic":"p","by":"ops@host","at":"2026-01-02T03:04:05Z"}`, `{"v":1,"op":"replay","topic":"orders","partition":3,"key":"aw==","hash":3285391650,"offset":42,"by":"ops@host","at":"2026-01-02T03:04:05Z"}`, `{"v":1,"op":"replay","topic":"orders","partition":3,"key":"aw==","hash":3285391650,"offset":5,"next":9,"replay_to":7,"by":"ops@host","at":"2026-01-02T03:04:05Z"}`, `{"v":1,"op":"park","topic":"orders","partition":3,"key":"aw==","hash":3285391650,"offset":0,"park_topic":"p","replay_to":7,"by":"ops@host","at":"2026-01-02T03:04:05Z"}`, `{"v":1,"op":"skip","topic":"orders","partition":3,"key":"aw==","hash":3285391651,"offset":42,"by":"ops@host","at":"2026-01-02T03:04:05Z"}`, `{"v":1,"op":"skip","topic":"orders","partition":4,"key":"aw==","hash":3285391650,"offset":42,"by":"ops@host","at":"2026-01-02T03:04:05Z"}`, `{"v":1,"op":"skip","topic":"orders","partition":3,"key":"aw==","hash":3285391650,"offset":-1,"by":"ops@host","at":"2026-01-02T03:04:05Z"}`}),
	"loss": decoderFor(recSchema.LostRange("orders", 3, 100, 7), func(key string, b []byte) (LossRecord, error) { return DecodeLoss(recGroup, key, b) },
		[]string{`{"v":1,"member":"m1","topic":"orders","partition":3,"lo":100,"hi":200,"at":"2026-01-02T03:04:05Z","log_start":7,"segments":[{"lo":100,"hi":200,"pending":[3],"unread_from":5}]}`},
		[]string{`{"v":1,"member":"m1","topic":"orders","partition":4,"lo":100,"hi":200,"at":"2026-01-02T03:04:05Z","log_start":7,"segments":[]}`}),
}

func TestDecoderSeeds(t *testing.T) {
	t.Parallel()
	for name, d := range decoders {
		t.Run(name, func(t *testing.T) {
			for _, s := range d.valid {
				if !d.check(t, []byte(s)) {
					t.Errorf("valid seed refused: %s", s)
				}
			}
			for _, s := range d.invalid {
				if d.check(t, []byte(s)) {
					t.Errorf("invalid seed accepted: %s", s)
				}
			}
		})
	}
}

func fuzzDecoder(f *testing.F, name string) {
	d := decoders[name]
	for _, s := range append(append(append([]string{}, d.valid...), d.invalid...), ``, `null`, `{}`, `[]`, `{"v":2}`, `{"v":1}`) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { d.check(t, data) })
}

func FuzzDecodeRange(f *testing.F) { fuzzDecoder(f, "range") }

func FuzzDecodeMember(f *testing.F) { fuzzDecoder(f, "member") }

func FuzzDecodeCommit(f *testing.F) { fuzzDecoder(f, "commit") }

func FuzzDecodeGeneration(f *testing.F) { fuzzDecoder(f, "generation") }

func FuzzDecodeLoad(f *testing.F) { fuzzDecoder(f, "load") }

func FuzzDecodeHotKeys(f *testing.F) { fuzzDecoder(f, "hotkeys") }

func FuzzDecodeTopic(f *testing.F) { fuzzDecoder(f, "topic") }

func FuzzDecodePause(f *testing.F) { fuzzDecoder(f, "pause") }

func FuzzDecodeHandoff(f *testing.F) { fuzzDecoder(f, "handoff") }

func FuzzDecodeLeave(f *testing.F) { fuzzDecoder(f, "leave") }

func FuzzDecodeStuck(f *testing.F) { fuzzDecoder(f, "stuck") }

func FuzzDecodeLoss(f *testing.F) { fuzzDecoder(f, "loss") }

func FuzzDecodeKeyOp(f *testing.F) { fuzzDecoder(f, "keyop") }

func FuzzDecodeSubscription(f *testing.F) { fuzzDecoder(f, "subscription") }
