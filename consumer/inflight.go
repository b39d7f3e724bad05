package consumer

// inFlight is the records dispatched and not finished (queued or running):
// what the in-flight bounds count (backpressure.go). The pipeline holds it
// under p.mu.
type inFlight struct {
	inflight int
	// inflightBytes: the keys, values and headers of the in-flight
	// records (recordBytes).
	inflightBytes int64
	// jobs are the in-flight records by partition and offset.
	jobs map[tp]map[int64]*job
}

// track counts j in flight, and untrack counts it out; the caller adds j
// to jobs or removes it.
func (f *inFlight) track(j *job) {
	f.inflight++
	f.inflightBytes += recordBytes(j.m)
}

func (f *inFlight) untrack(j *job) {
	f.inflight--
	f.inflightBytes -= recordBytes(j.m)
}
