package state

import "github.com/keyshare/keyshare/internal/keys"

// DefaultPrefix is the etcd prefix under which groups live unless
// configured otherwise (Config.Prefix).
const DefaultPrefix = keys.DefaultPrefix

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

func (g Group) schema() keys.Schema { return keys.ForGroup(g.Prefix, g.Name) }
