package membercmd

import (
	"flag"

	"google.golang.org/grpc"

	"github.com/keyshare/keyshare/consumer"
)

// Lab is what keyshare-bench adds to the member for tests and benchmarks:
// flags of its own, a handler that stands in for --deliver (simulated
// work, failures, a stuck key, a log of the records handled) and etcd
// client options (an audit log of the writes etcd accepted). The product
// has none of it: its member always delivers (docs/delivery.md).
type Lab interface {
	// Register adds the lab's flags to the member's.
	Register(fs *flag.FlagSet)
	// Check checks the lab's flags once all are parsed, before any
	// network; delivering says that --deliver is given, which replaces
	// the lab's handler. Its error is a usage error naming the flag.
	Check(delivering bool) error
	// Start opens what the lab writes for the member memberID. The
	// member calls LabRun.Close when it has stopped.
	Start(memberID string, delivering bool) (LabRun, error)
}

// LabRun is a started lab: the handlers the member uses without --deliver
// (BatchHandler with --batch-size) and options for its etcd client.
type LabRun struct {
	Handler      consumer.Handler
	BatchHandler consumer.BatchHandler
	DialOptions  []grpc.DialOption
	Close        func()
}

// labFlags are the flags keyshare member gave up to keyshare-bench member,
// named when the product is given one (flags.go).
var labFlags = []string{"work", "fail-rate", "stall", "record", "audit"}
