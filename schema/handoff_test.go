package schema

import "testing"

// TestDecodeHandoff: a plan that names a member outside its members, or a
// revision that cannot be a record's, is damaged; the stored plan keeps its
// revision (so the leader can replace it) and no range.
func TestDecodeHandoff(t *testing.T) {
	t.Parallel()
	key := recSchema.Handoff("a")
	for _, v := range []string{
		`{"v":1,"gen":3,"members":{"b":2},"ranges":[{"key":"k","rev":5,"to":"c"}]}`,
		`{"v":1,"gen":3,"members":{"b":2},"ranges":[{"key":"k","rev":0,"to":"b"}]}`,
		`{"v":1,"gen":3,"members":{"b":2},"ranges":[],"extra":1}`,
		`{"v":1,"gen":3,"members":{"b":2},"ranges":[{"key":"k","rev":13,"to":"b"}]}`,                  // planned after it was written
		`{"v":1,"gen":3,"members":{"b":9223372036854775807},"ranges":[{"key":"k","rev":5,"to":"b"}]}`, // registered after it
		`{"v":1,"gen":3,"members":{"b/c":2},"ranges":[{"key":"k","rev":5,"to":"b/c"}]}`,               // no member id
		`{"v":1,"gen":9223372036854775807,"members":{"b":2},"ranges":[{"key":"k","rev":5,"to":"b"}]}`,
	} {
		h, err := DecodeHandoff(key, []byte(v), 12)
		if err == nil || h.Rev != 12 || len(h.ByKey) != 0 {
			t.Errorf("%s: stored %+v, error %v; want an error, revision 12 and no range", v, h, err)
		}
	}
	h, err := DecodeHandoff(key, []byte(`{"v":1,"gen":3,"members":{"b":2},"ranges":[{"key":"k","rev":5,"to":"b"}]}`), 12)
	if err != nil || h.ByKey["k"] != (PlannedHandoff{Key: "k", Rev: 5, To: "b"}) {
		t.Fatalf("stored %+v, error %v", h, err)
	}
}
