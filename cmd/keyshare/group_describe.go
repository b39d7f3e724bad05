package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/cmd/internal/cli"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/schema"
)

// describe prints the group's state line, then status's view of it (or,
// with --json, describeJSON).
func (c *groupCommand) describe(ctx context.Context, fs *flag.FlagSet, args []string) error {
	var asJSON, stateOnly bool
	fs.BoolVar(&asJSON, "json", false, "print JSON (a stable schema: docs/cli.md)")
	fs.BoolVar(&stateOnly, "state", false, "print the state line only (kafka-consumer-groups --describe --state)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if asJSON && stateOnly {
		return cli.Usage(errors.New("give --json or --state, not both (the JSON has the state)"))
	}
	if err := coord.CheckName("--group", c.group); err != nil {
		return cli.Usage(err)
	}
	ks, err := c.kafkaConn.Settings()
	if err != nil {
		return err
	}
	cfg, err := c.etcdConn.Config()
	if err != nil {
		return err
	}
	g := schema.Group{Prefix: c.prefix, Name: c.group}
	cli, err := c.etcdConn.Connect(ctx, cfg, schema.Group{Prefix: c.prefix, Name: c.group}.Keys().Root())
	if err != nil {
		return err
	}
	defer cli.Close()
	kc, err := statusConsumer(ks, c.group, &kafkaLog{echo: os.Stderr})
	if err != nil {
		return err
	}
	if kc != nil {
		defer kc.Close()
	}
	st, err := readStatus(ctx, cli, kc, g)
	if err != nil {
		return err
	}
	gs := st.State
	if asJSON {
		return printStatusJSON(os.Stdout, st, true)
	}
	fmt.Printf("group %s: %s, %d members\n", name(c.group), gs, len(st.Members))
	if !stateOnly {
		printStatus(os.Stdout, st)
	}
	return nil
}

// list prints the groups under --prefix with their states.
func (c *groupCommand) list(ctx context.Context, fs *flag.FlagSet, args []string) error {
	var asJSON bool
	fs.BoolVar(&asJSON, "json", false, "print JSON")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	cfg, err := c.etcdConn.Config()
	if err != nil {
		return err
	}
	cli, err := c.etcdConn.Connect(ctx, cfg, c.prefix)
	if err != nil {
		return err
	}
	defer cli.Close()
	groups, err := admin.List(ctx, cli, c.prefix)
	if err != nil {
		return err
	}
	if asJSON {
		if groups == nil {
			groups = []admin.Summary{}
		}
		b, err := json.MarshalIndent(groups, "", "  ")
		if err != nil {
			return err
		}
		_, err = os.Stdout.Write(append(textsafe.JSON(b), '\n'))
		return err
	}
	printGroups(os.Stdout, groups)
	return nil
}

func printGroups(w io.Writer, groups []admin.Summary) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tSTATE\tMEMBERS")
	for _, g := range groups {
		fmt.Fprintf(tw, "%s\t%s\t%d\n", name(g.Name), g.State, g.Members)
	}
	tw.Flush()
}
