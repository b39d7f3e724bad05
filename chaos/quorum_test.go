package chaos

import (
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"
)

// quorumLost is how long row 9c keeps etcd without a quorum: the row is
// in the long form only (make chaos).
const quorumLost = 60 * time.Second

func init() {
	rows = append(rows, row{
		name: "9c etcd loses its quorum (two of three members stopped)", etcdMembers: 3, everyone: true,
		fault: func(e *env, _ bool, _ *rand.Rand) {
			leader := etcdLeader(e)
			stopped := []int{leader, (leader + 1) % 3} // one follower is left
			for _, i := range stopped {
				if err := e.etcdCluster.Stop(i); err != nil {
					e.t.Fatal(err)
				}
			}
			lost := time.Now()
			e.fault()
			time.Sleep(quorumLost)
			back := time.Now()
			for _, i := range stopped {
				if err := e.etcdCluster.Restart(i); err != nil {
					e.t.Fatal(err)
				}
			}
			// No member may start a record once its session could have
			// expired: its last keepalive was answered before the quorum
			// was lost, so its deadline passed by TTL after it.
			e.mu.Lock()
			e.noStarts = append(e.noStarts, window{from: lost.Add(ttl), to: back})
			e.mu.Unlock()
		},
		check: checkNoStarts,
	})
}

// window is a span of time [from, to).
type window struct{ from, to time.Time }

// checkNoStarts fails the row if a member started a record inside one of
// the env's noStarts windows.
func checkNoStarts(t *testing.T, e *env) {
	e.mu.Lock()
	windows := append([]window(nil), e.noStarts...)
	e.mu.Unlock()
	if len(windows) == 0 {
		t.Fatal("the row recorded no window to check")
	}
	files, _ := filepath.Glob(filepath.Join(e.dir, "*.jsonl"))
	n := 0
	for _, f := range files {
		for _, l := range readLines(t, f) {
			n++
			for _, w := range windows {
				if !l.Start.Before(w.from) && l.Start.Before(w.to) {
					t.Errorf("member %s started partition %d offset %d at %s, %s into a span where its session had expired (%s to %s)",
						l.Member, l.Partition, l.Offset, l.Start.Format("15:04:05.000"), l.Start.Sub(w.from).Round(time.Millisecond),
						w.from.Format("15:04:05.000"), w.to.Format("15:04:05.000"))
					return
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no record logs to check")
	}
}
