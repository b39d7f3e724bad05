package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// CommandHelp is what -h prints about a command above its flags.
type CommandHelp struct {
	// Description is one paragraph: what the command does and when to use it.
	Description string
	// Example is a command line or a few, one per line.
	Example string
	// Args names the command's arguments besides its flags ("KEY"), for
	// the usage line; empty for a command of flags only.
	Args string
}

// Program is the binary's name ("keyshare"); Help holds its commands' help
// by flag set name ("member", "group describe"). Both are set once, before
// any command runs.
var (
	Program string
	Help    map[string]CommandHelp
)

func helpName(fs *flag.FlagSet) string {
	if Program == "" {
		return fs.Name()
	}
	return Program + " " + fs.Name()
}

// printHelp prints the command's usage line, description, example and
// flags, and where flags come from besides the command line.
func printHelp(w io.Writer, fs *flag.FlagSet) {
	h := Help[fs.Name()]
	args := ""
	if h.Args != "" {
		args = " " + h.Args
	}
	fmt.Fprintf(w, "Usage: %s [flags]%s\n\n", helpName(fs), args)
	if h.Description != "" {
		fmt.Fprintf(w, "%s\n\n", wrap(strings.TrimSpace(h.Description), 76))
	}
	if h.Example != "" {
		fmt.Fprintf(w, "Example:\n")
		for line := range strings.Lines(strings.TrimSpace(h.Example)) {
			fmt.Fprintf(w, "  %s", line)
		}
		fmt.Fprintf(w, "\n\n")
	}
	fmt.Fprintf(w, "Flags:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	if EnvPrefix != "" {
		fmt.Fprintf(w, "\nEach flag may also be set by an environment variable: --FLAG-NAME by $%s, as in $%s for --etcd.\nA flag on the command line wins over its variable, which wins over the default.\n",
			EnvName("FLAG-NAME"), EnvName("etcd"))
	}
}

// wrap breaks text into lines of at most width bytes, between words.
func wrap(text string, width int) string {
	var b strings.Builder
	n := 0
	for _, word := range strings.Fields(text) {
		switch {
		case n == 0:
		case n+1+len(word) > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}

// Inspect, when set, receives each flag set Parse is given instead of
// parsing it, and Parse returns flag.ErrHelp: how shell completion learns
// a command's flags without running it.
var Inspect func(fs *flag.FlagSet)
