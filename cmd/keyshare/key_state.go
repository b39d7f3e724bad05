package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/cmd/internal/clientflags"
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
// It is refused while the group has live members (statestore.DeleteKey
// says why a pause is not enough).
func (c *keyCommand) deleteState(ctx context.Context, fs *flag.FlagSet, args []string) error {
	var changelog string
	fs.StringVar(&changelog, "changelog", "", "the changelog topic (default GROUP-TOPIC-state)")
	qp, parse := keyQueryFlags(fs)
	if err := parse(args, "delete the state of"); err != nil {
		return err
	}
	q := *qp
	etcd, g, ks, info, err := c.openAndDescribe(ctx, q)
	if err != nil {
		return err
	}
	defer etcd.Close()
	defer g.Close()
	ids, err := g.LiveMembers(ctx)
	if err != nil {
		return err
	}
	if len(ids) > 0 {
		return fmt.Errorf("group %s has live members (%s): stop them first; a paused group's members keep their ranges, whose tokens a deletion must be above; nothing was changed",
			name(c.group), textsafe.FirstFew(ids, ", ", name))
	}
	now, err := etcd.Get(ctx, schema.Group{Prefix: c.prefix, Name: c.group}.Keys().Root(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("read etcd's revision: %w", err)
	}
	if changelog == "" {
		changelog = statestore.DefaultChangelog(c.group, info.Topic)
	}
	st, err := statestore.DeleteKey(ctx, ks.With(nil), changelog, info.Partition, q.Key, now.Header.Revision)
	if err != nil {
		return ks.Explain(err)
	}
	fmt.Fprintf(os.Stdout, "deleted the state of key %s in %s/%d: %d bytes, applied offset %d (a tombstone under token %d)\n",
		textsafe.Quote(string(q.Key)), name(changelog), info.Partition, len(st.Value), st.Applied, now.Header.Revision)
	return nil
}
