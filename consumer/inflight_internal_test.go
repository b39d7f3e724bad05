package consumer

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestJobListModel steps a jobList and a plain slice of the same jobs
// through random pushes and removals, some of jobs at offsets already
// queued (a seek back): the list must hold the same jobs in the same
// order, find each by offset, and tell a removed job from a listed one
// of the same offset.
func TestJobListModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var l jobList
		var model []*job
		var removed []*job
		next := int64(0)
		for step := range 60 {
			switch {
			case len(model) > 0 && rng.IntN(3) == 0:
				i := rng.IntN(len(model))
				j := model[i]
				l.remove(j)
				model = slices.Delete(model, i, i+1)
				removed = append(removed, j)
			case rng.IntN(8) == 0 && next > 0:
				// A seek back: an offset below the highest queued.
				o := rng.Int64N(next)
				if old := l.at(o); old != nil {
					if !l.mayHold(o) {
						t.Fatalf("round %d step %d: mayHold(%d) false, but the list holds it", round, step, o)
					}
					continue // the submit drops the old one first; not modelled here
				}
				j := &job{o: o}
				l.push(j)
				model = append(model, j)
			default:
				j := &job{o: next}
				next++
				l.push(j)
				model = append(model, j)
			}
			if got := slices.Collect(l.all()); !slices.Equal(got, model) {
				t.Fatalf("round %d step %d: list %v, want %v", round, step, offsetsOf(got), offsetsOf(model))
			}
			for _, j := range model {
				if !l.holds(j) || l.at(j.o) != j || !l.mayHold(j.o) {
					t.Fatalf("round %d step %d: job at %d listed, but holds %v, at finds %p (want %p), mayHold %v", round, step, j.o, l.holds(j), l.at(j.o), j, l.mayHold(j.o))
				}
			}
			for _, j := range removed {
				if l.holds(j) {
					t.Fatalf("round %d step %d: removed job at %d still held", round, step, j.o)
				}
			}
			if len(model) == 0 && (l.head != nil || l.tail != nil) {
				t.Fatalf("round %d step %d: empty list with head %p, tail %p", round, step, l.head, l.tail)
			}
		}
	}
}

// TestJobListRemoveWhileIterating removes each job as all yields it, as
// abandonLocked does.
func TestJobListRemoveWhileIterating(t *testing.T) {
	var l jobList
	jobs := []*job{{o: 1}, {o: 2}, {o: 3}, {o: 4}}
	for _, j := range jobs {
		l.push(j)
	}
	var seen []int64
	for j := range l.all() {
		seen = append(seen, j.o)
		if j.o%2 == 0 {
			l.remove(j)
		}
	}
	if !slices.Equal(seen, []int64{1, 2, 3, 4}) {
		t.Fatalf("yielded %v, want 1 2 3 4", seen)
	}
	if got := offsetsOf(slices.Collect(l.all())); !slices.Equal(got, []int64{1, 3}) {
		t.Fatalf("left %v, want 1 3", got)
	}
	var none *jobList
	if none.holds(jobs[0]) || none.at(1) != nil || len(slices.Collect(none.all())) != 0 {
		t.Fatal("the nil list is not empty")
	}
}

func offsetsOf(jobs []*job) []int64 {
	var out []int64
	for _, j := range jobs {
		out = append(out, j.o)
	}
	return out
}
