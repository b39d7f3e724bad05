package consumer_test

import (
	"os"
	"testing"

	"github.com/keyshare/keyshare/testutil"
)

// TestMain stops the shared Apache Kafka broker after the tests when
// KEYSHARE_KAFKA=apache (make test-kafka); on kfake it only runs them.
func TestMain(m *testing.M) { os.Exit(testutil.RunTests(m)) }
