package coord

import "github.com/keyshare/keyshare/assign"

// The assignor and the load balancing are pure decisions, in package
// assign. Their types are part of coord's API (snapshots, plans, load
// reports), so coord names them too; these are the same types.
type (
	TopicPartition  = assign.TopicPartition
	PartitionWeight = assign.PartitionWeight
	MemberWeight    = assign.MemberWeight
	Slice           = assign.Slice
	RangeLoad       = assign.RangeLoad
	HotKey          = assign.HotKey
)

const (
	// MaxWeight is the largest member weight (Config.Weight): assign.MaxWeight.
	MaxWeight = assign.MaxWeight
	// LoadBuckets is the number of parts of a RangeLoad's histogram: assign.LoadBuckets.
	LoadBuckets = assign.LoadBuckets
	// MaxHotKeys is the most hot keys a RangeLoad lists: assign.MaxHotKeys.
	MaxHotKeys = assign.MaxHotKeys
)

// Assign is assign.Assign.
func Assign(parts []PartitionWeight, members []MemberWeight, prev []Slice) []Slice {
	return assign.Assign(parts, members, prev)
}

// AssignContiguous is assign.AssignContiguous.
func AssignContiguous(parts []PartitionWeight, members []MemberWeight, prev []Slice) []Slice {
	return assign.AssignContiguous(parts, members, prev)
}
