package deliver

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/keyshare/keyshare/consumer"
)

// TestFencedAnswer: "fenced" in a batch answer is a *FencedError that
// matches consumer.ErrFenced (which the consumer never dead-letters) and
// is no RefusedError; "failed" beside it is a RefusedError that does not
// match ErrFenced. The records are counted by outcome, and a fenced
// record's next request is its attempt 2.
func TestFencedAnswer(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	var second request
	ep, _ := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		req := readRequest(t, r)
		if n.Add(1) == 1 {
			io.WriteString(w, `{"results":[{"status":"done"},{"status":"fenced","error":"token 7 < 9 \u001b[31m"},{"status":"failed","error":"no account"}]}`)
			return
		}
		second = req
		io.WriteString(w, `{"results":[{"status":"done"},{"status":"done"},{"status":"done"}]}`)
	})
	batch := []*kafka.Message{message("orders", 0, 1, "a"), message("orders", 0, 2, "b"), message("orders", 1, 1, "c")}
	res := ep.BatchHandler()(t.Context(), batch)
	if len(res) != 3 || res[0] != nil {
		t.Fatalf("results %v, want the first done", res)
	}
	var fenced *FencedError
	var refused *RefusedError
	if !errors.Is(res[1], consumer.ErrFenced) || !errors.As(res[1], &fenced) || errors.As(res[1], &refused) {
		t.Errorf("fenced result = %v (%T): want a *FencedError matching consumer.ErrFenced, not a RefusedError", res[1], res[1])
	} else if fenced.Body != `"token 7 < 9 \x1b[31m"` {
		t.Errorf("fenced body %q: want the endpoint's text escaped", fenced.Body)
	}
	if !errors.As(res[2], &refused) || errors.Is(res[2], consumer.ErrFenced) {
		t.Errorf("failed result = %v: want a RefusedError that does not match consumer.ErrFenced", res[2])
	}
	if got := recordCounts(t, ep); got["done"] != 1 || got["fenced"] != 1 || got["failed"] != 1 {
		t.Errorf("records counted %v, want done 1, fenced 1, failed 1", got)
	}
	if res := ep.BatchHandler()(t.Context(), batch); res[0] != nil || res[1] != nil || res[2] != nil {
		t.Fatalf("second call's results %v, want all done", res)
	}
	if got := []int{second.Records[0].Attempt, second.Records[1].Attempt, second.Records[2].Attempt}; !equal(got, []int{1, 2, 2}) {
		t.Errorf("second request's attempts %v, want [1 2 2]", got)
	}
}

// TestUnknownStatusWaits: a result status this release does not know
// (as "fenced" is to a release before it) makes the whole answer the
// endpoint's trouble: nothing is failed or dead-lettered, the request is
// sent again until the answer is one the member reads.
func TestUnknownStatusWaits(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	ep, _ := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		readRequest(t, r)
		if n.Add(1) <= 2 {
			io.WriteString(w, `{"results":[{"status":"superseded"}]}`)
			return
		}
		io.WriteString(w, `{"results":[{"status":"done"}]}`)
	})
	if err := ep.Handler()(t.Context(), message("orders", 0, 1, "k")); err != nil {
		t.Fatalf("handler = %v, want nil once the endpoint answered done", err)
	}
	byOutcome, waiting := requestCounts(t, ep)
	if n.Load() != 3 || byOutcome["trouble"] != 2 || byOutcome["done"] != 1 || waiting != 0 {
		t.Errorf("%d requests, by outcome %v, %v waiting; want 3: 2 trouble, then done", n.Load(), byOutcome, waiting)
	}
}

// recordCounts is the records counted per outcome.
func recordCounts(t *testing.T, ep *Endpoint) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(ep.Collector())
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "keyshare_deliver_records_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	return out
}
