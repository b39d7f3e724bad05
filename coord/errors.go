package coord

import (
	"errors"
	"fmt"
	"strings"
)

// Errors a caller can branch on.
var (
	// ErrMemberExists: another live member registered the same id.
	ErrMemberExists = errors.New("coord: member id already registered by a live member")
	// ErrNotLeader: a leader write was refused because the writer is no
	// longer the leader.
	ErrNotLeader = errors.New("coord: not leader")
	// ErrSessionLost: the member's etcd session ended; everything it owned
	// must stop.
	ErrSessionLost = errors.New("coord: session lost")
)

// ErrFenced is matched (errors.Is) by a *FencedError.
var ErrFenced = errors.New("coord: fenced")

// FencedError names the ranges (their range keys, RangeState.Key) whose
// ownership guard failed: the writer no longer owns them and must stop
// working on them. Ranges not named here were written.
type FencedError struct {
	Keys []string
	// Session is true when the common guard failed (the writer's session or
	// membership is gone): every write was refused.
	Session bool
}

func (e *FencedError) Error() string {
	if e.Session {
		return fmt.Sprintf("coord: fenced: the writer's session guard failed; %d range(s) not written", len(e.Keys))
	}
	return "coord: fenced on " + strings.Join(e.Keys, ", ")
}

func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// TooLargeError names the ranges whose write etcd refused as larger than
// its request limit (--max-request-bytes, 1.5 MiB by default). The other
// ranges of the call were written (or are named in a *FencedError joined
// to this one).
type TooLargeError struct {
	Keys  []string
	Bytes []int // the size of each write (keys and values)
}

func (e *TooLargeError) Error() string {
	var b strings.Builder
	for i, k := range e.Keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%d bytes)", k, e.Bytes[i])
	}
	return "coord: etcd refused ledger writes larger than its request limit: " + b.String() +
		"; raise etcd's --max-request-bytes, or keep entries smaller (fewer records in flight per range)"
}

// ErrGroupChanged: an administrator's write was refused because a member
// registered, or the state it was planned on changed, since it was read.
// Nothing of the refused transaction was applied.
var ErrGroupChanged = errors.New("coord: the group changed while it was written")

// ErrNotGroupRoot: a prefix/group pair names a tree that is not one
// group's alone, because the root lies inside another group's tree or
// holds keys that are not keyshare's (for example other groups below it).
// An administrator's write there could destroy another group's state.
var ErrNotGroupRoot = errors.New("coord: not a group's root")

// TopicsDifferError is Join's refusal of a member whose topics differ from
// those of a live member of the group. Nothing was written.
type TopicsDifferError struct {
	Group        string
	Topics       []string // the joining member's, sorted
	Member       string   // a live member whose topics differ
	MemberTopics []string // its topics, sorted
}

func (e *TopicsDifferError) Error() string {
	return fmt.Sprintf("coord: this member's topics %v differ from the topics %v of group %q (live member %q consumes %v); "+
		"every member of a group consumes the same topics: set Config.Topics (keyshare member --topic) to %v, "+
		"or stop every member of the group before changing its topics",
		e.Topics, e.MemberTopics, e.Group, e.Member, e.MemberTopics, e.MemberTopics)
}
