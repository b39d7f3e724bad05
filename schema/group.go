package schema

import "strings"

// Group names one group's state in etcd: every key of the group lives under
// Root() (docs/etcd-keys.md lists them). Functions that read or write a
// group's keys without a Session (ReadSnapshot, ReadPause, the Decode
// functions) take a Group.
type Group struct {
	Prefix string // the etcd prefix of all groups; "" means DefaultPrefix
	Name   string // the group's name (Config.Group)
}

// Root is the etcd prefix of the group's keys, ending in "/".
func (g Group) Root() string { return g.Keys().Root() }

// Keys builds the group's etcd keys, under DefaultPrefix when Prefix is "":
// the one place the default applies.
func (g Group) Keys() Keys {
	prefix := g.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return Keys{root: strings.TrimRight(prefix, "/") + "/" + g.Name + "/", prefix: prefix, group: g.Name}
}
