// Package cli is what keyshare's binaries (keyshare and keyshare-bench)
// share on the command line: a main that runs one command until SIGINT or
// SIGTERM and turns its error into an exit status, flag parsing whose
// errors are one-line usage errors naming the flag (exit status 2), flags
// from environment variables (EnvPrefix), -h with a command's description
// and example (Help), and the --kafka flag that picks the bundled
// cluster's broker.
//
//	func main() {
//		cli.Main("keyshare-bench", (&benchCommand{}).Run, os.Args[1:])
//	}
//
//	func (c *benchCommand) Run(ctx context.Context, args []string) error {
//		fs := flag.NewFlagSet("keyshare-bench", flag.ContinueOnError)
//		cli.KafkaFlag(fs, &c.kafka)
//		if err := cli.Parse(fs, args); err != nil {
//			return err
//		}
//		if c.runs < 1 {
//			return cli.Usage(fmt.Errorf("--runs %d: want at least 1", c.runs))
//		}
//		...
//	}
package cli
