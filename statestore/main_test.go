package statestore

import (
	"os"
	"testing"

	"github.com/keyshare/keyshare/testutil"
)

// TestMain stops the shared Apache Kafka broker of KEYSHARE_KAFKA=apache
// runs, and removes its data, once the package's tests are done.
func TestMain(m *testing.M) { os.Exit(testutil.RunTests(m)) }
