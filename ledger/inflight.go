package ledger

// Dispatched is the number of pending offsets handed to a worker in this
// process and not yet completed.
func (st *State) Dispatched() int {
	n := 0
	for i := range st.segs {
		st.segs[i].pending.each(func(_ int64, f uint8, _ uint32) {
			if f == dispatched {
				n++
			}
		})
	}
	return n
}

// inFlight reports whether o is in flight in one of st's parts.
func (st *State) inFlight(o int64) bool {
	for i := range st.segs {
		if _, flag := st.segs[i].pending.lookup(o); flag == dispatched {
			return true
		}
	}
	return false
}
