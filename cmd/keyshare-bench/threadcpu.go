package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// librdkafkaThreads is the prefix of the names librdkafka gives its
// threads (rdk:main, rdk:broker1, rdk:bg): the throughput table splits a
// reader's CPU into theirs and the rest, which is Go's (confluent-kafka-go
// building messages, and keyshare).
const librdkafkaThreads = "rdk:"

// threadsCPU sums the time on CPU, in ns, of the threads under taskDir
// (/proc/self/task) whose name starts with prefix, and counts them. A
// thread's time is its schedstat's first field, which the kernel keeps in
// ns (a thread's stat counts clock ticks of 10 ms). A thread that ends
// between two readings takes its time with it: librdkafka's live as long
// as its client.
func threadsCPU(taskDir, prefix string) (ns int64, threads int, err error) {
	tasks, err := os.ReadDir(taskDir)
	if err != nil {
		return 0, 0, err
	}
	for _, t := range tasks {
		comm, err := os.ReadFile(filepath.Join(taskDir, t.Name(), "comm"))
		if err != nil || !strings.HasPrefix(string(comm), prefix) {
			continue // ended since the listing, or not one of them
		}
		st, err := os.ReadFile(filepath.Join(taskDir, t.Name(), "schedstat"))
		if err != nil {
			continue
		}
		run, _, _ := strings.Cut(strings.TrimSpace(string(st)), " ")
		v, err := strconv.ParseInt(run, 10, 64)
		if err != nil {
			return 0, 0, err
		}
		ns += v
		threads++
	}
	return ns, threads, nil
}
