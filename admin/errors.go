package admin

import (
	"errors"
	"fmt"
	"strings"
)

// Errors a caller branches on.
var (
	// ErrLiveMembers: the group has live members; stop them first.
	ErrLiveMembers = errors.New("admin: the group has live members")
	// ErrUnknownGroup: nothing is stored under the group's prefix.
	ErrUnknownGroup = errors.New("admin: unknown group")
	// ErrBadReset: the reset names a topic, partition or offset that does
	// not exist, or a time in the future.
	ErrBadReset = errors.New("admin: bad reset")
)

// liveMembersError is a refusal because the group has live members: it
// reads as a sentence about the group ("group "demo" has live members: a,
// b (...)") and matches ErrLiveMembers.
type liveMembersError struct {
	group string
	ids   []string
	// then is what to do, and what was not done: "(stop them first);
	// nothing was changed".
	then string
}

func (e liveMembersError) Error() string {
	return fmt.Sprintf("admin: group %q has live members: %s %s", e.group, strings.Join(e.ids, ", "), e.then)
}

func (e liveMembersError) Is(target error) bool { return target == ErrLiveMembers }
