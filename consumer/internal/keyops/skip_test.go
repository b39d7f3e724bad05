package keyops

import (
	"testing"

	"github.com/keyshare/keyshare/schema"
)

// TestDecideSkip: what a stored operation means to the key's record at
// offset 10.
func TestDecideSkip(t *testing.T) {
	skip := func(offset int64) schema.KeyOpRecord {
		return schema.KeyOpRecord{Op: schema.KeyOpSkip, Offset: offset, By: "ops"}
	}
	dropped, refused, park := skip(10), skip(10), skip(10)
	dropped.Drop, refused.Refused, park.Op = true, "earlier", schema.KeyOpPark
	for _, tc := range []struct {
		name        string
		r           schema.KeyOpRecord
		deadLetters bool
		want        SkipVerdict
	}{
		{"this record", skip(10), true, SkipApply},
		{"a later record", skip(11), true, SkipNone},
		{"an earlier record", skip(9), true, SkipPassed},
		{"an earlier record, no dead-letter topic", skip(9), false, SkipPassed},
		{"no dead-letter topic", skip(10), false, SkipRefused},
		{"dropped, no dead-letter topic", dropped, false, SkipApply},
		{"refused already", refused, true, SkipNone},
		{"not a skip", park, true, SkipNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := DecideSkip(tc.r, 10, tc.deadLetters); got != tc.want {
				t.Errorf("DecideSkip = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSkipCause: the dead letter's cause names the operator, and their
// reason when they gave one.
func TestSkipCause(t *testing.T) {
	r := schema.KeyOpRecord{Op: schema.KeyOpSkip, By: "alice@host"}
	if got, want := SkipCause(r), "skipped by an operator (alice@host)"; got != want {
		t.Errorf("cause %q, want %q", got, want)
	}
	r.Reason = "poison record"
	if got, want := SkipCause(r), "skipped by an operator (alice@host): poison record"; got != want {
		t.Errorf("cause %q, want %q", got, want)
	}
}

// TestCopyOrder: copies are handled while their tokens do not fall; one
// below the newest handled is passed over, and does not lower it.
func TestCopyOrder(t *testing.T) {
	o := NewCopyOrder()
	for _, step := range []struct {
		token int64
		admit bool
	}{{5, true}, {5, true}, {7, true}, {6, false}, {7, true}, {0, false}, {9, true}} {
		if got := o.Admit(step.token); got != step.admit {
			t.Fatalf("Admit(%d) = %v with newest %d, want %v", step.token, got, o.Newest(), step.admit)
		}
	}
	if o.Newest() != 9 {
		t.Fatalf("newest %d, want 9", o.Newest())
	}
}
