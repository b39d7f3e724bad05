package coord

import (
	"github.com/keyshare/keyshare/schema"
)

// CheckName reports whether name can be a group name, a member id or a
// topic: each is a path element of the group's etcd keys, so it must be
// non-empty, at most 249 bytes, and hold no '/' or NUL. what names the
// value in the error (a field or a flag, e.g. "--group").
func CheckName(what, name string) error { return schema.CheckName(what, name) }

// group is the Group the session belongs to.
func (s *Session) group() schema.Group { return schema.Group{Prefix: s.cfg.Prefix, Name: s.cfg.Group} }
