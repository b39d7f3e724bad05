package cli

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/keyshare/keyshare/internal/devcluster"
)

// usageError is a problem with the command line (exit status 2).
type usageError struct{ error }

// Usage marks err as a problem with the command line: Main exits with
// status 2 for it.
func Usage(err error) error { return usageError{err} }

// Parse parses args with fs, turning flag errors into usage errors.
func Parse(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(os.Stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return Usage(err)
	}
	if fs.NArg() > 0 {
		return Usage(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	return nil
}

// KafkaFlag registers --kafka, the broker of the bundled cluster.
func KafkaFlag(fs *flag.FlagSet, v *string) {
	fs.StringVar(v, "kafka", "kfake", "the bundled cluster's broker: kfake (in process, no dependencies) or apache (Apache Kafka "+devcluster.ApacheKafkaVersion+
		" in a JVM; needs java 17+, and mvn the first time to fetch its jars from Maven Central)")
}

// CheckKafkaFlag refuses a --kafka value KafkaFlag does not offer.
func CheckKafkaFlag(v string) error {
	if v != "kfake" && v != "apache" {
		return Usage(fmt.Errorf("--kafka %q: want kfake or apache", v))
	}
	return nil
}
