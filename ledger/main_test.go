package ledger_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/keyshare/keyshare/testutil"
)

// TestMain fails the package if a test leaves goroutines behind. The ledger
// starts none; the ignored ones belong to etcd's client and embedded server,
// which keep a few process-wide goroutines after Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testutil.EtcdGoroutines()...)
}
