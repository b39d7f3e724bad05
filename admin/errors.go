package admin

import "errors"

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
