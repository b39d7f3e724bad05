package schedule

import (
	"fmt"
	"hash/maphash"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The scheduler's share of a record's cost, against the least a handoff
// between goroutines costs. Both hand 16 workers jobs of 1,000 keys that
// do nothing but count themselves done, the way the consumer's
// BenchmarkPipeline hands records to its workers (with the pipeline's own
// bookkeeping around each). cpu-ns/op is the process's CPU time per job.
//
//	go test -run '^$' -bench Handoff -benchtime 1000000x -cpu 1,2 ./consumer/internal/schedule/

// benchJob is a job of the benchmarks: about the size of a consumer's.
type benchJob struct {
	key benchKey
	o   int64
	_   [28]int64
}

// benchKey carries its hash, as the consumer's keys carry their record
// key's.
type benchKey struct {
	name string
	hash uint64
}

func (k benchKey) Hash() uint64 { return k.hash }

func benchKeys() []benchKey {
	seed := maphash.MakeSeed()
	keys := make([]benchKey, 1000)
	for i := range keys {
		name := fmt.Sprint("key-", i)
		keys[i] = benchKey{name, maphash.String(seed, name)}
	}
	return keys
}

// runHandoff submits b.N jobs through submit and reports the CPU time per
// job; done counts the jobs finished. Like the consumer's fetch loop at
// its in-flight bound, it waits for the jobs in flight every 1,024.
func runHandoff(b *testing.B, done *sync.WaitGroup, submit func(*benchJob)) {
	keys := benchKeys()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for i := 0; i < b.N; i++ {
		done.Add(1)
		submit(&benchJob{key: keys[i%len(keys)], o: int64(i)})
		if i%1024 == 1023 {
			done.Wait()
		}
	}
	done.Wait()
	b.StopTimer()
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkSchedulerHandoff is the Scheduler alone: a job's submit, its
// key's turn, a worker's take and the key's release; the jobs submitted
// one per hold of the scheduler's lock, or 64 at a time as a burst of
// the consumer's fetch loop submits them (SubmitAll).
func BenchmarkSchedulerHandoff(b *testing.B) {
	for _, per := range []int{1, 64} {
		b.Run(fmt.Sprintf("%d-per-hold", per), func(b *testing.B) {
			var done sync.WaitGroup
			s := New[benchKey](16, func(*benchJob, time.Time) { done.Done() })
			defer s.Close()
			now := time.Now()
			var keys []benchKey
			var jobs []*benchJob
			queued := make([]bool, per)
			runHandoff(b, &done, func(j *benchJob) {
				keys, jobs = append(keys, j.key), append(jobs, j)
				// As the fetch loop, submit before waiting for the jobs
				// in flight (runHandoff waits every 1,024).
				if len(jobs) == per || j.o%1024 == 1023 || int(j.o) == b.N-1 {
					s.SubmitAll(keys, jobs, 0, now, queued)
					keys, jobs = keys[:0], jobs[:0]
				}
			})
		})
	}
}

// BenchmarkChannelHandoff is the floor: the same jobs through a buffered
// channel to 16 goroutines, with no order kept, each finished job counted
// under a mutex as a completion would be.
func BenchmarkChannelHandoff(b *testing.B) {
	var done sync.WaitGroup
	var mu sync.Mutex
	finished := 0
	jobs := make(chan *benchJob, 1024)
	for range 16 {
		go func() {
			for range jobs {
				mu.Lock()
				finished++
				mu.Unlock()
				done.Done()
			}
		}()
	}
	defer close(jobs)
	runHandoff(b, &done, func(j *benchJob) { jobs <- j })
	if finished != b.N {
		b.Fatalf("%d jobs finished, want %d", finished, b.N)
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
