package consumer

// inFlight is the records dispatched and not finished (queued or running):
// what the in-flight bounds count (backpressure.go). The pipeline holds it
// under p.mu.
type inFlight struct {
	inflight int
	// inflightBytes: the keys, values and headers of the in-flight
	// records (recordBytes).
	inflightBytes int64
	// jobs are the in-flight records by partition and offset. A
	// partition's map, once made, stays for the pipeline's life: the
	// partition's ranges keep it (owned.jobs), so that a record's
	// dispatch and finish reach it without a lookup by partition.
	jobs map[tp]map[int64]*job
}

// partitionJobs returns the in-flight records of w's partition, by
// offset, made the first time one is dispatched.
func (f *inFlight) partitionJobs(w *owned) map[int64]*job {
	if w.jobs == nil {
		t := w.tp()
		if f.jobs[t] == nil {
			f.jobs[t] = make(map[int64]*job)
		}
		w.jobs = f.jobs[t]
	}
	return w.jobs
}

// isInFlight reports whether j is in flight: dispatched, and neither finished
// nor dropped since. A job is known by identity, not by its offset: a
// new job of the same offset may have been dispatched since j was
// dropped.
func (f *inFlight) isInFlight(j *job) bool { return j.w.jobs[j.o] == j }

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
