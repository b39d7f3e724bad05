package coord

import "github.com/keyshare/keyshare/internal/keys"

// DefaultPrefix is the etcd prefix under which groups live unless
// configured otherwise (Config.Prefix).
const DefaultPrefix = "/keyshare"

// Group names one group's state in etcd: every key of the group lives under
// Root() (docs/etcd-keys.md lists them). Functions that read or write a
// group's keys without a Session (ReadSnapshot, ReadPause, the Decode
// functions) take a Group.
type Group struct {
	Prefix string // the etcd prefix of all groups; "" means DefaultPrefix
	Name   string // the group's name (Config.Group)
}

// Root is the etcd prefix of the group's keys, ending in "/".
func (g Group) Root() string { return g.schema().Root() }

func (g Group) schema() keys.Schema {
	prefix := g.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return keys.New(prefix, g.Name)
}

// CheckName reports whether name can be a group name, a member id or a
// topic: each is a path element of the group's etcd keys, so it must be
// non-empty, at most 249 bytes, and hold no '/' or NUL. what names the
// value in the error (a field or a flag, e.g. "--group").
func CheckName(what, name string) error { return keys.CheckName(what, name) }

// group is the Group the session belongs to.
func (s *Session) group() Group { return Group{Prefix: s.cfg.Prefix, Name: s.cfg.Group} }
