package deliver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/deliver/deliverpb"
)

// memStates is a KeyState per key kept in a map, as a test's stand-in for
// package statestore (which this package must not import).
type memStates struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *memStates) lookup(_ context.Context, m *kafka.Message) KeyState {
	return &memKey{s: s, key: string(m.Key)}
}

func (s *memStates) get(key string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	return string(v), ok
}

type memKey struct {
	s   *memStates
	key string
}

func (k *memKey) Get() ([]byte, bool) {
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	v, ok := k.s.m[k.key]
	return v, ok
}

func (k *memKey) Put(v []byte) {
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	k.s.m[k.key] = v
}

func (k *memKey) Delete() {
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	delete(k.s.m, k.key)
}

func noStates(n int) []sentState { return make([]sentState, n) }

// rawRequest is a request's records as JSON, their "state" as it came.
type rawRequest struct {
	Records []struct {
		Key   []byte          `json:"key"`
		State json.RawMessage `json:"state"`
	} `json:"records"`
}

// countAnswer is a counting endpoint's results: each key's count, from
// the state the member sent (or, on a key's later records, from the
// record before), plus one; key "gone" deletes its state instead.
func countAnswer(req rawRequest) string {
	local := map[string]int{}
	var results []string
	for _, r := range req.Records {
		var st struct {
			Value    []byte `json:"value"`
			Previous bool   `json:"previous"`
		}
		_ = json.Unmarshal(r.State, &st)
		if string(r.Key) == "gone" {
			results = append(results, `{"status":"done","state":{"value":null}}`)
			continue
		}
		n := local[string(r.Key)]
		if !st.Previous {
			n, _ = strconv.Atoi(string(st.Value))
		}
		local[string(r.Key)] = n + 1
		v, _ := json.Marshal([]byte(strconv.Itoa(n + 1)))
		results = append(results, `{"status":"done","state":{"value":`+string(v)+`}}`)
	}
	return `{"results":[` + strings.Join(results, ",") + `]}`
}

// TestStateTravels: with KeyState set, each record carries its key's
// state, {"value": null} for a key with none and {"previous": true} for a
// key's later records in the request; the answer's changes reach the
// KeyStates, puts and a delete, and the next request carries them.
func TestStateTravels(t *testing.T) {
	t.Parallel()
	states := &memStates{m: map[string][]byte{"b": []byte("10"), "gone": []byte("x")}}
	var mu sync.Mutex
	var sent [][]string
	ep, _ := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		var req rawRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Error(err)
		}
		var got []string
		for _, rec := range req.Records {
			got = append(got, string(rec.State))
		}
		mu.Lock()
		sent = append(sent, got)
		mu.Unlock()
		io.WriteString(w, countAnswer(req))
	}, func(c *Config) { c.KeyState = states.lookup })
	batch := []*kafka.Message{message("orders", 0, 1, "a"), message("orders", 0, 2, "a"), message("orders", 0, 3, "b"), message("orders", 0, 4, "gone")}
	for i, err := range ep.BatchHandler()(t.Context(), batch) {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if err := ep.Handler()(t.Context(), message("orders", 0, 5, "a")); err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{`{"value":null}`, `{"previous":true}`, `{"value":"MTA="}`, `{"value":"eA=="}`},
		{`{"value":"Mg=="}`}, // "2": the batch's two records of a
	}
	if got, _ := json.Marshal(sent); string(got) != mustJSON(t, want) {
		t.Errorf("states sent\n got %s\nwant %s", got, mustJSON(t, want))
	}
	for key, want := range map[string]string{"a": "3", "b": "11"} {
		if got, ok := states.get(key); !ok || got != want {
			t.Errorf("key %s's state %q (%v), want %q", key, got, ok, want)
		}
	}
	if got, ok := states.get("gone"); ok {
		t.Errorf("key gone's state %q: want it deleted", got)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestStateEncoded: a key's state goes as base64, an empty one as "",
// none as null, and a key's later record in the request as previous.
func TestStateEncoded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sent sentState
		want string
	}{
		{sentState{value: []byte{0xff, 0}, present: true}, `{"value":"/wA="}`},
		{sentState{value: nil, present: true}, `{"value":""}`},
		{sentState{}, `{"value":null}`},
		{sentState{previous: true}, `{"previous":true}`},
	} {
		if got := mustJSON(t, newWireState(tc.sent)); got != tc.want {
			t.Errorf("%+v sent as %s, want %s", tc.sent, got, tc.want)
		}
	}
}

// TestNoStateField: without KeyState, and for a record whose lookup
// returns no KeyState (a nil *memKey included, which as an interface is
// not nil), a record carries no "state" at all.
func TestNoStateField(t *testing.T) {
	t.Parallel()
	for name, lookup := range map[string]func(context.Context, *kafka.Message) KeyState{
		"no KeyState": nil,
		"nil":         func(context.Context, *kafka.Message) KeyState { return nil },
		"typed nil":   func(context.Context, *kafka.Message) KeyState { return (*memKey)(nil) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ep, _ := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				if strings.Contains(string(body), `"state"`) {
					t.Errorf("request %s carries a state", body)
				}
			}, func(c *Config) { c.KeyState = lookup })
			if err := ep.Handler()(t.Context(), message("orders", 0, 1, "a")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestStateAnswerChecked: a result's "state" is read strictly. A put, an
// empty state, a delete and no change read as such (field names as
// encoding/json matches them, case aside); every malformed one, and one
// for a record sent without state or not done, makes the answer bad,
// its error naming the result's field and what to give instead.
func TestStateAnswerChecked(t *testing.T) {
	t.Parallel()
	withState := []sentState{{key: &memKey{}}}
	for _, tc := range []struct {
		name, result string
		sent         []sentState
		want         stateChange
		err          string // a part of the error; "" for none
	}{
		{"put", `{"status":"done","state":{"value":"Mw=="}}`, withState, stateChange{changed: true, value: []byte("3")}, ""},
		{"empty", `{"status":"done","state":{"value":""}}`, withState, stateChange{changed: true, value: []byte{}}, ""},
		{"escaped", `{"status":"done","state":{"value":"Mw\u003d\u003d"}}`, withState, stateChange{changed: true, value: []byte("3")}, ""},
		{"delete", `{"status":"done","state":{"value":null}}`, withState, stateChange{changed: true, deleted: true}, ""},
		{"unchanged", `{"status":"done"}`, withState, stateChange{}, ""},
		{".NET casing", `{"Status":"done","State":{"Value":"Mw=="}}`, withState, stateChange{changed: true, value: []byte("3")}, ""},
		{"failed, unchanged", `{"status":"failed","error":"no"}`, withState, stateChange{}, ""},
		{"no state sent", `{"status":"done","state":{"value":"Mw=="}}`, noStates(1), stateChange{}, "results[0].state: the request carried no state for this record"},
		{"on a failed record", `{"status":"failed","state":{"value":"Mw=="}}`, withState, stateChange{}, `results[0].state: a "failed" record changes no state`},
		{"on a fenced record", `{"status":"fenced","state":{"value":null}}`, withState, stateChange{}, `results[0].state: a "fenced" record changes no state`},
		{"null", `{"status":"done","state":null}`, withState, stateChange{}, `results[0].state: null: leave state out`},
		{"no value", `{"status":"done","state":{}}`, withState, stateChange{}, `results[0].state: {} has no "value"`},
		{"another field", `{"status":"done","state":{"delete":true}}`, withState, stateChange{}, `has no "value"`},
		{"not an object", `{"status":"done","state":"Mw=="}`, withState, stateChange{}, `results[0].state: want {"value": base64} or {"value": null}, got "Mw=="`},
		{"a number", `{"status":"done","state":{"value":3}}`, withState, stateChange{}, `results[0].state: value 3: want a base64 string`},
		{"an array", `{"status":"done","state":{"value":[51]}}`, withState, stateChange{}, `value [51]: want a base64 string`},
		{"not base64", `{"status":"done","state":{"value":"3"}}`, withState, stateChange{}, `value "3": want a base64 string (standard alphabet, padded)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, changes, err := decodeAnswer([]byte(`{"results":[`+tc.result+`]}`), tc.sent)
			if tc.err != "" {
				if !errors.Is(err, errBadAnswer) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("decodeAnswer = %v, %v, %v; want errBadAnswer with %q", res, changes, err, tc.err)
				}
				return
			}
			if err != nil || len(changes) != 1 {
				t.Fatalf("decodeAnswer = %v, %v, %v", res, changes, err)
			}
			if got := changes[0]; got.changed != tc.want.changed || got.deleted != tc.want.deleted ||
				string(got.value) != string(tc.want.value) || (got.value == nil) != (tc.want.value == nil) {
				t.Errorf("change %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestGRPCStateTravels: over gRPC a record's state is KeyState (value
// unset for a key with none, previous on a key's later records in the
// call), and a result's StateChange puts (value set) or deletes (unset).
func TestGRPCStateTravels(t *testing.T) {
	t.Parallel()
	states := &memStates{m: map[string][]byte{"b": []byte("10"), "gone": []byte("x")}}
	var mu sync.Mutex
	var sent []string
	ep, _ := newGRPCEndpoint(t, func(_ context.Context, req *deliverpb.DeliverRequest) (*deliverpb.DeliverResponse, error) {
		resp := &deliverpb.DeliverResponse{}
		local := map[string]int{}
		for _, r := range req.Records {
			st := r.GetState()
			mu.Lock()
			sent = append(sent, st.String())
			mu.Unlock()
			res := &deliverpb.Result{Status: done, State: &deliverpb.StateChange{}}
			if string(r.Key) != "gone" {
				n := local[string(r.Key)]
				if !st.GetPrevious() {
					n, _ = strconv.Atoi(string(st.GetValue()))
				}
				local[string(r.Key)] = n + 1
				res.State.Value = []byte(strconv.Itoa(n + 1))
			}
			resp.Results = append(resp.Results, res)
		}
		return resp, nil
	}, func(c *Config) { c.KeyState = states.lookup })
	batch := []*kafka.Message{message("orders", 0, 1, "a"), message("orders", 0, 2, "a"), message("orders", 0, 3, "b"), message("orders", 0, 4, "gone")}
	for i, err := range ep.BatchHandler()(t.Context(), batch) {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if err := ep.Handler()(t.Context(), message("orders", 0, 5, "a")); err != nil {
		t.Fatal(err)
	}
	want := []string{``, `previous:true`, `value:"10"`, `value:"x"`, `value:"2"`}
	for i := range want {
		if i >= len(sent) || strings.Join(strings.Fields(sent[i]), " ") != want[i] {
			t.Errorf("states sent %q, want %q", sent, want)
			break
		}
	}
	for key, want := range map[string]string{"a": "3", "b": "11"} {
		if got, ok := states.get(key); !ok || got != want {
			t.Errorf("key %s's state %q (%v), want %q", key, got, ok, want)
		}
	}
	if got, ok := states.get("gone"); ok {
		t.Errorf("key gone's state %q: want it deleted", got)
	}
}

// TestGRPCStateAnswerChecked: a StateChange for a record the call carried
// no state for, or on a record not DONE, makes the answer bad, naming the
// result's field.
func TestGRPCStateAnswerChecked(t *testing.T) {
	t.Parallel()
	change := &deliverpb.StateChange{Value: []byte("3")}
	for _, tc := range []struct {
		name string
		res  *deliverpb.Result
		sent []sentState
		err  string
	}{
		{"no state sent", &deliverpb.Result{Status: done, State: change}, noStates(1), "results[0].state: the call carried no state for this record"},
		{"on a failed record", &deliverpb.Result{Status: failed, State: change}, []sentState{{key: &memKey{}}}, "results[0].state: a RECORD_STATUS_FAILED record changes no state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := decodeResults([]*deliverpb.Result{tc.res}, tc.sent)
			if !errors.Is(err, errBadAnswer) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("decodeResults = %v; want errBadAnswer with %q", err, tc.err)
			}
		})
	}
}
