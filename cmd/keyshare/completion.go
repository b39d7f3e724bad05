package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/keyshare/keyshare/cmd/internal/cli"
)

// groupSubcommands are the subcommands of keyshare group.
var groupSubcommands = []string{"describe", "reset-offsets", "pause", "resume", "delete"}

// subcommands are the subcommands of the commands that have them.
var subcommands = map[string][]string{"group": groupSubcommands, "key": keySubcommands}

// completionCommand prints a shell completion script for the commands,
// group's subcommands and each one's flags.
type completionCommand struct{}

func (completionCommand) Run(_ context.Context, args []string) error {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		if err := cli.Parse(flag.NewFlagSet("completion", flag.ContinueOnError), args); err != nil {
			return err
		}
		return cli.Usage(errors.New("want a shell: bash, zsh or fish"))
	}
	flags := commandFlags()
	switch args[0] {
	case "bash":
		writeBash(os.Stdout, flags)
	case "zsh":
		fmt.Fprint(os.Stdout, "#compdef keyshare\nautoload -U +X bashcompinit && bashcompinit\n")
		writeBash(os.Stdout, flags)
	case "fish":
		writeFish(os.Stdout, flags)
	default:
		return cli.Usage(fmt.Errorf("%q: want bash, zsh or fish", args[0]))
	}
	return nil
}

// commandFlags runs each command (and group subcommand) only as far as
// its flag set, by flag set name ("member", "group pause").
func commandFlags() map[string][]*flag.Flag {
	out := map[string][]*flag.Flag{}
	cli.Inspect = func(fs *flag.FlagSet) {
		fs.VisitAll(func(f *flag.Flag) { out[fs.Name()] = append(out[fs.Name()], f) })
		if _, ok := out[fs.Name()]; !ok {
			out[fs.Name()] = nil
		}
	}
	defer func() { cli.Inspect = nil }()
	for name, mk := range commands {
		if subs, ok := subcommands[name]; ok {
			for _, sub := range subs {
				_ = mk().Run(context.Background(), []string{sub})
			}
			continue
		}
		_ = mk().Run(context.Background(), nil)
	}
	return out
}

func flagWord(f *flag.Flag) string {
	if len(f.Name) == 1 {
		return "-" + f.Name
	}
	return "--" + f.Name
}

func commandNames() []string {
	names := []string{"help"}
	for name := range commands {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func writeBash(w io.Writer, flags map[string][]*flag.Flag) {
	words := func(name string) string {
		var ws []string
		for _, f := range flags[name] {
			ws = append(ws, flagWord(f))
		}
		return strings.Join(ws, " ")
	}
	fmt.Fprintf(w, `# keyshare completion for bash: source <(keyshare completion bash)
_keyshare() {
    local cur="${COMP_WORDS[COMP_CWORD]}" cmd="${COMP_WORDS[1]}" sub="${COMP_WORDS[2]}" flags=""
    if [[ $COMP_CWORD -eq 1 ]]; then
        COMPREPLY=($(compgen -W "%s" -- "$cur")); return
    fi
    case "$cmd" in
    help) [[ $COMP_CWORD -eq 2 ]] && COMPREPLY=($(compgen -W "%[1]s" -- "$cur")); return ;;
    completion) COMPREPLY=($(compgen -W "bash zsh fish" -- "$cur")); return ;;
`, strings.Join(commandNames(), " "))
	for _, name := range commandNames() {
		subs, ok := subcommands[name]
		if !ok {
			continue
		}
		fmt.Fprintf(w, `    %s)
        if [[ $COMP_CWORD -eq 2 ]]; then COMPREPLY=($(compgen -W "%s" -- "$cur")); return; fi
        case "$sub" in
`, name, strings.Join(subs, " "))
		for _, sub := range subs {
			fmt.Fprintf(w, "        %s) flags=%q ;;\n", sub, words(name+" "+sub))
		}
		fmt.Fprint(w, "        esac ;;\n")
	}
	for _, name := range commandNames() {
		if _, ok := flags[name]; ok && name != "completion" {
			fmt.Fprintf(w, "    %s) flags=%q ;;\n", name, words(name))
		}
	}
	fmt.Fprint(w, `    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}
complete -o filenames -F _keyshare keyshare
`)
}

func writeFish(w io.Writer, flags map[string][]*flag.Flag) {
	quote := func(s string) string {
		if len(s) > 70 {
			s = s[:67] + "..."
		}
		return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
	}
	fmt.Fprintln(w, "# keyshare completion for fish: keyshare completion fish | source")
	fmt.Fprintf(w, "complete -c keyshare -f -n __fish_use_subcommand -a %s\n", quote(strings.Join(commandNames(), " ")))
	fmt.Fprintf(w, "complete -c keyshare -f -n '__fish_seen_subcommand_from help' -a %s\n", quote(strings.Join(commandNames(), " ")))
	fmt.Fprintln(w, "complete -c keyshare -f -n '__fish_seen_subcommand_from completion' -a 'bash zsh fish'")
	for _, name := range commandNames() {
		if subs, ok := subcommands[name]; ok {
			fmt.Fprintf(w, "complete -c keyshare -f -n '__fish_seen_subcommand_from %s; and not __fish_seen_subcommand_from %s' -a %s\n",
				name, strings.Join(subs, " "), quote(strings.Join(subs, " ")))
		}
	}
	names := make([]string, 0, len(flags))
	for name := range flags {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		cond := "__fish_seen_subcommand_from " + name
		if cmd, sub, ok := strings.Cut(name, " "); ok {
			cond = "__fish_seen_subcommand_from " + cmd + "; and __fish_seen_subcommand_from " + sub
		}
		for _, f := range flags[name] {
			opt := "-l " + f.Name
			if len(f.Name) == 1 {
				opt = "-s " + f.Name
			}
			fmt.Fprintf(w, "complete -c keyshare -n %s %s -d %s\n", quote(cond), opt, quote(f.Usage))
		}
	}
}
