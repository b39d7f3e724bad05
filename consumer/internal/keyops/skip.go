package keyops

import (
	"fmt"

	"github.com/keyshare/keyshare/schema"
)

// SkipVerdict is what a skip stored for a key means to one of its
// records (DecideSkip).
type SkipVerdict int

const (
	// SkipNone: no skip applies to this record now (none stored, not a
	// skip, refused already, or it names a later record).
	SkipNone SkipVerdict = iota
	// SkipPassed: the skip names an earlier record, which the key has
	// passed; it is deleted, never applied to another record.
	SkipPassed
	// SkipRefused: the skip names this record but cannot be applied: it
	// asks for a dead letter and there is no dead-letter topic. It is
	// marked refused with NoDeadLetterTopic.
	SkipRefused
	// SkipApply: the record is skipped instead of handled.
	SkipApply
)

// NoDeadLetterTopic is why a skip that asks for a dead letter is refused
// on a member with no dead-letter topic.
const NoDeadLetterTopic = "no dead-letter topic is configured: skip with --drop to drop the record"

// DecideSkip is what r, the operation stored for a key, means to the
// key's record at offset (its head record at its next attempt);
// deadLetters says the member has a dead-letter topic.
func DecideSkip(r schema.KeyOpRecord, offset int64, deadLetters bool) SkipVerdict {
	switch {
	case r.Op != schema.KeyOpSkip || r.Refused != "" || r.Offset > offset:
		return SkipNone
	case r.Offset < offset:
		return SkipPassed
	case !r.Drop && !deadLetters:
		return SkipRefused
	}
	return SkipApply
}

// SkipCause is the cause a record skipped by r carries in its dead
// letter: the operator who asked, and their reason if they gave one.
func SkipCause(r schema.KeyOpRecord) string {
	cause := fmt.Sprintf("skipped by an operator (%s)", r.By)
	if r.Reason != "" {
		cause += ": " + r.Reason
	}
	return cause
}
