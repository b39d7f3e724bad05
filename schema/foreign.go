package schema

import "sort"

// The closed set of names directly under a group's root. A key under the
// root whose first path element is not one of these is not keyshare's: an
// administrator's prefix/group pair then names something else (another
// group nested inside, or a tree that holds other groups), and a delete of
// the root would destroy it. Add a name here with every new key kind.
var (
	// dirs hold keys below them: <root><name>/...
	dirs = []string{"commits", "election", "handoffs", "hotkeys", "keyops", "leaving", "ledger", "load", "lost", "members", "ranges", "stuck", "subscriptions", "topics"}
	// singles are keys of their own: <root><name>
	singles = []string{"generation", "paused"}
)

// KeyRange is the half-open etcd key range [From, To).
type KeyRange struct{ From, To string }

// Foreign returns the key ranges under the root that hold no key of the
// schema, in key order. A group whose keys all belong to the schema has no
// key in any of them, so one count-only read per range proves it.
func (s Keys) Foreign() []KeyRange {
	var own []KeyRange
	for _, d := range dirs {
		// Every key with prefix <root><d>/ lies in [<root><d>/, <root><d>0):
		// '0' is the byte after '/'.
		own = append(own, KeyRange{s.root + d + "/", s.root + d + "0"})
	}
	for _, k := range singles {
		own = append(own, KeyRange{s.root + k, s.root + k + "\x00"})
	}
	sort.Slice(own, func(i, j int) bool { return own[i].From < own[j].From })
	var gaps []KeyRange
	at := s.root
	for _, r := range own {
		if at < r.From {
			gaps = append(gaps, KeyRange{at, r.From})
		}
		at = max(at, r.To)
	}
	// The end of the root's prefix range: the root with its last byte
	// ('/') raised by one, as clientv3.GetPrefixRangeEnd computes it.
	end := s.root[:len(s.root)-1] + "0"
	if at < end {
		gaps = append(gaps, KeyRange{at, end})
	}
	return gaps
}

// Enclosing returns the schemas rooted at each directory above the root
// ("/", "/keyshare/", ...), outermost first. If one of them holds a group,
// the root lies inside that group's tree.
func (s Keys) Enclosing() []Keys {
	var out []Keys
	for i := 0; i < len(s.root)-1; i++ {
		if s.root[i] == '/' {
			out = append(out, Keys{root: s.root[:i+1]})
		}
	}
	return out
}
