package cli

import (
	"flag"
	"fmt"
	"strings"
)

// EnvPrefix, when set, lets every flag come from the environment: --FLAG
// from $EnvPrefix_FLAG, upper case with '-' as '_' (--max-in-flight from
// $KEYSHARE_MAX_IN_FLIGHT). A flag on the command line wins over its
// variable, which wins over the default. A variable gives a repeatable
// flag one value.
var EnvPrefix string

// EnvName is the environment variable of the flag name under EnvPrefix.
func EnvName(name string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// setFromEnv sets each flag of fs that the command line did not set from
// its variable, if that is set.
func setFromEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	if EnvPrefix == "" {
		return nil
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] {
			return
		}
		v, ok := lookup(EnvName(f.Name))
		if !ok {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			// The value is not repeated: a variable may hold a secret.
			err = Usage(fmt.Errorf("$%s (for --%s): %s", EnvName(f.Name), f.Name, wants(f, serr.Error())))
		}
	})
	return err
}
