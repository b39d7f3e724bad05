package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"time"

	"github.com/keyshare/keyshare/internal/devcluster"
)

// usageError is a problem with the command line (exit status 2).
type usageError struct{ error }

// Usage marks err as a problem with the command line: Main exits with
// status 2 for it.
func Usage(err error) error { return usageError{err} }

// Parse parses args with fs, then sets each flag the command line did not
// give from its environment variable (env.go). A bad flag is a one-line
// usage error naming it; -h or --help prints the command's help (help.go)
// on stdout and returns flag.ErrHelp.
func Parse(fs *flag.FlagSet, args []string) error {
	// The flag package prints every flag's usage after any error; the
	// error alone, naming the flag, says more.
	fs.SetOutput(io.Discard)
	if Inspect != nil {
		Inspect(fs)
		return flag.ErrHelp
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printHelp(os.Stdout, fs)
			return err
		}
		return Usage(flagError(fs, err))
	}
	if fs.NArg() > 0 {
		return Usage(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	return setFromEnv(fs, os.LookupEnv)
}

var (
	badValue   = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-([^:]+): (.*)$`)
	undefined  = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	needsValue = regexp.MustCompile(`^flag needs an argument: -+(.*)$`)
)

// flagError words an error of the flag package with the flag as users
// write it (--ttl) and what it wants.
func flagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if m := badValue.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("--%s %q: %s", m[2], m[1], wants(fs.Lookup(m[2]), m[3]))
	}
	if m := undefined.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("unknown flag --%s: run '%s -h' for the flags", m[1], helpName(fs))
	}
	if m := needsValue.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("--%s needs a value", m[1])
	}
	return err
}

// wants says what a flag's value must look like, from its type; why is the
// parser's own reason, kept for the types it does not know.
func wants(f *flag.Flag, why string) string {
	if f == nil {
		return why
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return why
	}
	switch g.Get().(type) {
	case time.Duration:
		return "want a duration with its unit, such as 500ms, 10s or 1m30s"
	case int, int64, uint, uint64:
		return "want a whole number"
	case float64:
		return "want a number"
	case bool:
		return "want true or false"
	}
	return why
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

// List is a repeatable string flag.
type List []string

func (l *List) String() string     { return fmt.Sprint(*l) }
func (l *List) Set(v string) error { *l = append(*l, v); return nil }
