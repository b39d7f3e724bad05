package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/keyshare/keyshare/cmd/internal/cli"
	"github.com/keyshare/keyshare/cmd/internal/clientflags"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/statestore"
)

// A key's keyed state: the part of keyshare key describe --state (the
// key's state as its changelog holds it, statestore.ReadKey) and keyshare
// key delete-state.

// stateShown is how many bytes of a state the text form shows.
const stateShown = 200

// keyStateJSON is the key's state in describe --json.
type keyStateJSON struct {
	Changelog string `json:"changelog"`
	Partition int32  `json:"partition"`
	Found     bool   `json:"found"`
	Deleted   bool   `json:"deleted"`
	Size      int    `json:"size"`
	Value     string `json:"value"` // escaped (textsafe)
	Applied   *int64 `json:"applied"`
	Fence     *int64 `json:"fence"`
	ReadTo    int64  `json:"read_to"`
}

// readKeyState reads key's state from changelog (default the group's for
// topic) in partition.
func (c *keyCommand) readKeyState(ctx context.Context, ks *clientflags.KafkaSettings, changelog, topic string, partition int32, key []byte) (statestore.KeyState, error) {
	if changelog == "" {
		changelog = statestore.DefaultChangelog(c.group, topic)
	}
	st, err := statestore.ReadKey(ctx, ks.With(nil), changelog, partition, key)
	if err != nil {
		return statestore.KeyState{}, ks.Explain(err)
	}
	return st, nil
}

func keyStateJSONOf(st statestore.KeyState) *keyStateJSON {
	out := &keyStateJSON{Changelog: st.Changelog, Partition: st.Partition, Found: st.Found, Deleted: st.Deleted, Size: len(st.Value), Value: textsafe.Bytes(st.Value), ReadTo: st.ReadTo}
	if st.Found {
		out.Applied, out.Fence = &st.Applied, &st.Fence
	}
	return out
}

// printKeyState prints the key's state lines of describe's text form.
func printKeyState(w io.Writer, st statestore.KeyState) {
	where := fmt.Sprintf("(changelog %s/%d, read to offset %d)", name(st.Changelog), st.Partition, st.ReadTo)
	switch {
	case !st.Found:
		fmt.Fprintf(w, "state      none %s\n", where)
	case st.Deleted:
		fmt.Fprintf(w, "state      deleted by the record at offset %d, token %d %s\n", st.Applied, st.Fence, where)
	default:
		fmt.Fprintf(w, "state      %d bytes, applied offset %d, token %d %s\n", len(st.Value), st.Applied, st.Fence, where)
		v := st.Value
		more := ""
		if len(v) > stateShown {
			v, more = v[:stateShown], fmt.Sprintf(" and %d more bytes (--json has them all)", len(st.Value)-stateShown)
		}
		fmt.Fprintf(w, "value      %s%s\n", textsafe.Quote(string(v)), more)
	}
}

// deleteState deletes one key's keyed state: keyshare key delete-state.
// The group must be paused or stopped: a record of the key that runs
// after the state is read makes a change the tombstone loses to. With the
// key's range owned by a live member, it waits for the owner's copy of
// the tombstone (statestore.DeleteKey), which says the owner holds the
// deletion before the group resumes.
func (c *keyCommand) deleteState(ctx context.Context, fs *flag.FlagSet, args []string) error {
	var changelog string
	var wait time.Duration
	fs.StringVar(&changelog, "changelog", "", "the changelog topic (default GROUP-TOPIC-state)")
	fs.DurationVar(&wait, "wait", 30*time.Second, "with the key's range owned by a live member: how long to wait for the owner's copy of the tombstone")
	qp, parse := keyQueryFlags(fs)
	if err := parse(args, "delete the state of"); err != nil {
		return err
	}
	if wait <= 0 {
		return cli.Usage(fmt.Errorf("--wait %s: want a duration above 0, such as 30s", wait))
	}
	q := *qp
	etcd, g, ks, info, err := c.openAndDescribe(ctx, q)
	if err != nil {
		return err
	}
	defer etcd.Close()
	defer g.Close()
	pause, _, err := coord.ReadPause(ctx, etcd, schema.Group{Prefix: c.prefix, Name: c.group})
	if err != nil {
		return err
	}
	if !pause.Paused {
		ids, err := g.LiveMembers(ctx)
		if err != nil {
			return err
		}
		if len(ids) > 0 {
			return fmt.Errorf("group %s has live members (%s) and is not paused: pause it first: keyshare group pause --group %s (a record of the key that runs after its state is read would win over the deletion); nothing was changed",
				name(c.group), textsafe.FirstFew(ids, ", ", name), name(c.group))
		}
	}
	owner := ""
	if r := info.Range; r != nil && r.OwnerLive {
		owner = r.Owner
	} else {
		wait = 0 // no member holds the range: the next owner's restore reads the deletion
	}
	if changelog == "" {
		changelog = statestore.DefaultChangelog(c.group, info.Topic)
	}
	key := textsafe.Quote(string(q.Key))
	where := fmt.Sprintf("%s/%d", name(changelog), info.Partition)
	if owner != "" {
		fmt.Fprintf(os.Stdout, "deleting the state of key %s in %s, then waiting up to %s for the owner of its range, %s, to hand the tombstone back\n", key, where, wait, name(owner))
	}
	d, err := statestore.DeleteKey(ctx, ks.With(nil), changelog, info.Partition, q.Key, wait)
	var lost *statestore.LostDeletionError
	switch {
	case errors.Is(err, statestore.ErrNotConfirmed):
		tomb := fmt.Sprintf("the tombstone at offset %d of %s is appended", d.Tombstone, where)
		if d.Again {
			tomb = fmt.Sprintf("the key was deleted already, by a tombstone at its applied offset %d in %s", d.State.Applied, where)
		}
		return fmt.Errorf("%s, but the key's owner %s did not hand it back within --wait %s: it holds no state of the range yet (its next record of the range restores it and reads the deletion) or it is behind in the changelog. "+
			"Before resuming the group, restart %s (its restore reads the deletion), or run this again with a longer --wait: it waits for the owner's copy",
			tomb, name(owner), wait, name(owner))
	case errors.As(err, &lost):
		return err
	case err != nil:
		return ks.Explain(err)
	}
	switch {
	case d.Again && d.CopyAt < 0:
		fmt.Fprintf(os.Stdout, "the state of key %s in %s was deleted already, at applied offset %d; its owner %s holds the deletion (its copy under token %d)\n",
			key, where, d.State.Applied, name(owner), d.CopyToken)
	case d.Again:
		fmt.Fprintf(os.Stdout, "the state of key %s in %s was deleted already, at applied offset %d; its owner %s now holds the deletion (its copy at offset %d, token %d)\n",
			key, where, d.State.Applied, name(owner), d.CopyAt, d.CopyToken)
	case d.Confirmed:
		fmt.Fprintf(os.Stdout, "deleted the state of key %s in %s: %d bytes, applied offset %d (the tombstone at offset %d); its owner %s holds the deletion (its copy at offset %d, token %d)\n",
			key, where, len(d.State.Value), d.State.Applied, d.Tombstone, name(owner), d.CopyAt, d.CopyToken)
	default:
		fmt.Fprintf(os.Stdout, "deleted the state of key %s in %s: %d bytes, applied offset %d (the tombstone at offset %d); no live member owns its range, and its next owner's restore reads the deletion\n",
			key, where, len(d.State.Value), d.State.Applied, d.Tombstone)
	}
	return nil
}
