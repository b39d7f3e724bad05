package consumer

import "iter"

// inFlight is the records dispatched and not finished (queued or running):
// what the in-flight bounds count (backpressure.go). The pipeline holds it
// under p.mu.
type inFlight struct {
	inflight int
	// inflightBytes: the keys, values and headers of the in-flight
	// records (recordBytes).
	inflightBytes int64
	// jobs are the in-flight records by partition. A partition's list,
	// once made, stays for the pipeline's life: the partition's ranges
	// keep it (owned.jobs), so that a record's dispatch and finish reach
	// it without a lookup by partition.
	jobs map[tp]*jobList
	// parkers copy parked keys' records to their parking topics, by key,
	// while a key has copies to write or on their way (park.go).
	parkers map[jobKey]*keyParker
}

// partitionJobs returns the in-flight records of w's partition, made the
// first time one is dispatched.
func (f *inFlight) partitionJobs(w *owned) *jobList {
	if w.jobs == nil {
		t := w.tp()
		if f.jobs[t] == nil {
			f.jobs[t] = new(jobList)
		}
		w.jobs = f.jobs[t]
	}
	return w.jobs
}

// jobsOf yields the in-flight records of t, in the order they were
// queued; the one yielded may be dropped.
func (f *inFlight) jobsOf(t tp) iter.Seq[*job] { return f.jobs[t].all() }

// jobAt is the in-flight record of t at offset o, or nil. It walks the
// partition's records: it is for the stuck report, off the data path.
func (f *inFlight) jobAt(t tp, o int64) *job { return f.jobs[t].at(o) }

// isInFlight reports whether j is in flight: dispatched, and neither finished
// nor dropped since. A job is known by identity, not by its offset: a
// new job of the same offset may have been dispatched since j was
// dropped.
func (f *inFlight) isInFlight(j *job) bool { return j.w.jobs.holds(j) }

// track counts j in flight, and untrack counts it out; the caller adds j
// to its partition's jobs or removes it.
func (f *inFlight) track(j *job) {
	f.inflight++
	f.inflightBytes += recordBytes(j.m)
}

func (f *inFlight) untrack(j *job) {
	f.inflight--
	f.inflightBytes -= recordBytes(j.m)
}

// jobList is a partition's in-flight records in the order they were
// queued: a list through the jobs themselves (job.prev, job.next), so
// that queuing a record and finishing it cost no map operation. Finding a
// record by its offset (at) walks the list, and only for an offset at or
// below top: the submit's check for a duplicate finds nothing to walk
// unless the fetch sought back. The nil list is empty.
type jobList struct {
	head, tail *job
	// top is the highest offset queued since the list was last empty: it
	// holds no record above it.
	top int64
}

// push appends j, which is in no list.
func (l *jobList) push(j *job) {
	if l.head == nil || j.o > l.top {
		l.top = j.o
	}
	j.prev, j.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = j
	} else {
		l.head = j
	}
	l.tail = j
}

// remove takes j, which holds says is in l, out of l.
func (l *jobList) remove(j *job) {
	if j.prev != nil {
		j.prev.next = j.next
	} else {
		l.head = j.next
	}
	if j.next != nil {
		j.next.prev = j.prev
	} else {
		l.tail = j.prev
	}
	j.prev, j.next = nil, nil
}

// holds reports whether j is in l. A job in a list has a previous one
// unless it is the list's head, and remove clears a job's links; a job is
// only ever in its range's partition's list (partitionJobs).
func (l *jobList) holds(j *job) bool {
	return l != nil && (j.prev != nil || l.head == j)
}

// all yields l's records from the first queued; the one yielded may be
// removed, and no other.
func (l *jobList) all() iter.Seq[*job] {
	return func(yield func(*job) bool) {
		if l == nil {
			return
		}
		for j := l.head; j != nil; {
			next := j.next
			if !yield(j) {
				return
			}
			j = next
		}
	}
}

// at is l's record at offset o, or nil.
func (l *jobList) at(o int64) *job {
	if !l.mayHold(o) {
		return nil
	}
	for j := range l.all() {
		if j.o == o {
			return j
		}
	}
	return nil
}

// mayHold reports whether l can hold a record at offset o: at walks the
// list only then.
func (l *jobList) mayHold(o int64) bool { return l != nil && l.head != nil && o <= l.top }
