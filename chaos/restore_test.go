package chaos

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/keyshare/keyshare/internal/devcluster"
)

// backupAge is how much older than etcd's state the restored backup is in
// row 19.
const backupAge = 3 * time.Second

// restoreBump is the revision bump of the restore: more than the writes
// made since the backup, so that every revision after the restore is above
// every revision before it (docs/operations.md, "Restoring etcd").
const restoreBump = 1_000_000

func init() {
	rows = append(rows, row{
		name: "19a etcd restored from a backup taken 3 s earlier", everyone: true,
		kfakeOnly: "it tests etcd's state going back; the broker plays no part",
		fault: func(e *env, _ bool, _ *rand.Rand) {
			e.restoreEtcd(backupAge)
		},
	}, row{
		name: "19b etcd restored from a backup taken 3 s earlier, every member killed and replaced", short: true, restore: true,
		kfakeOnly: "it tests etcd's state going back; the broker plays no part",
		fault: func(e *env, _ bool, _ *rand.Rand) {
			e.restoreEtcd(backupAge)
			ids := e.members()
			for _, id := range ids {
				e.stop(id, syscall.SIGKILL)
			}
			for range ids {
				e.start() // new ids: the killed members' registrations live until their leases end
			}
		},
		check: checkRestoreLogged,
	})
}

// restoreBound is the duplicates row 19b allows: what the group handled
// in the backup's age runs again from the restored ledgers, plus what each
// killed member had not flushed or had in flight.
func restoreBound(rate float64) int {
	return int(backupAge.Seconds()*rate) + 3*(int(flushInterval.Seconds()*rate)+maxInFlight)
}

// checkRestoreLogged fails the row unless the leader said why it moved
// Kafka's committed offsets back.
func checkRestoreLogged(t *testing.T, e *env) {
	logs, _ := filepath.Glob(filepath.Join(e.dir, "*.log"))
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "etcd's state is older than Kafka's") {
			return
		}
	}
	t.Errorf("no member logged that etcd's state is older than Kafka's after the restore")
}

// restoreEtcd takes a snapshot of etcd (etcdctl snapshot save), lets the
// group run on for age, then stops etcd as a crash would and restores the
// snapshot into its data directory the documented way (etcdutl snapshot
// restore --bump-revision --mark-compacted), and starts it again there.
func (e *env) restoreEtcd(age time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	backup := filepath.Join(e.dir, "backup.db")
	rc, err := e.cli.Snapshot(ctx)
	if err != nil {
		e.t.Fatalf("etcd snapshot: %v", err)
	}
	f, err := os.Create(backup)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		e.t.Fatalf("etcd snapshot: %v", err)
	}
	_ = rc.Close()
	if err := f.Close(); err != nil {
		e.t.Fatal(err)
	}
	time.Sleep(age)

	e.mu.Lock()
	srv := e.etcdSrv
	e.mu.Unlock()
	srv.Kill()
	e.fault()
	dataDir := filepath.Join(e.dir, "etcd")
	if err := os.RemoveAll(dataDir); err != nil {
		e.t.Fatal(err)
	}
	peer := "http://" + e.etcdPeer
	err = snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        backup,
		Name:                "keyshare",
		OutputDataDir:       dataDir,
		PeerURLs:            []string{peer},
		InitialCluster:      "keyshare=" + peer,
		InitialClusterToken: "etcd-cluster",
		RevisionBump:        restoreBump,
		MarkCompacted:       true,
	})
	if err != nil {
		e.t.Fatalf("etcd snapshot restore: %v", err)
	}
	srv, err = devcluster.StartEtcd(devcluster.EtcdOptions{Dir: dataDir,
		ClientAddr: strings.TrimPrefix(e.etcdURL, "http://"), PeerAddr: e.etcdPeer})
	if err != nil {
		e.t.Fatalf("start etcd on the restored data: %v", err)
	}
	e.mu.Lock()
	e.etcdSrv = srv
	e.restored = true
	e.mu.Unlock()
}
