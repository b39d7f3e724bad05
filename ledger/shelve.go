package ledger

// Shelve gives back a record that Observe answered Run but that its owner
// drops from memory without handling it (a blocked key's backlog): the
// offset stays pending, so the watermark cannot pass it, and it waits to be
// run again like an inherited pending offset. The next Observe of it, after
// the owner seeks back, answers Run.
func (st *State) Shelve(o int64, h uint32) error {
	for i := range st.segs {
		s := &st.segs[i]
		if !s.contains(h) {
			continue
		}
		idx, flag := s.pending.lookup(o)
		if flag != dispatched {
			return &OffsetError{Op: "shelve", Offset: o, Reason: "not in flight for this range", Err: ErrNotDispatched}
		}
		s.pending.flags[idx], s.pending.hashes[idx] = waiting, 0
		st.version++
		return nil
	}
	return &OffsetError{Op: "shelve", Offset: o, Reason: "hash outside the range", Err: ErrNotDispatched}
}
