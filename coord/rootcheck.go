package coord

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/schema"
)

// CheckRoot refuses, with ErrNotGroupRoot, a group whose root lies inside
// another group's tree or holds keys outside keyshare's schema. It reads
// each range of the root that no schema key falls in, and the member,
// election and generation keys of each directory above the root, asking
// for one key of each.
func CheckRoot(ctx context.Context, cli *clientv3.Client, g schema.Group) error {
	s := schemaOf(g)
	type probe struct {
		op      clientv3.Op
		outside string // "" for a range of the root; else the enclosing root
	}
	var probes []probe
	for _, r := range s.Foreign() {
		probes = append(probes, probe{op: clientv3.OpGet(r.From, clientv3.WithRange(r.To), clientv3.WithKeysOnly(), clientv3.WithLimit(1))})
	}
	for _, e := range s.Enclosing() {
		probes = append(probes,
			probe{clientv3.OpGet(e.Members(), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1)), e.Root()},
			probe{clientv3.OpGet(e.Election()+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1)), e.Root()},
			probe{clientv3.OpGet(e.Generation(), clientv3.WithKeysOnly()), e.Root()})
	}
	for len(probes) > 0 {
		n := min(len(probes), maxResetOps) // under etcd's limit of operations per transaction
		ops := make([]clientv3.Op, n)
		for i := range ops {
			ops[i] = probes[i].op
		}
		resp, err := cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("coord: read %s: %w", s.Root(), err)
		}
		for i, r := range resp.Responses {
			kvs := r.GetResponseRange().Kvs
			switch {
			case len(kvs) == 0:
			case probes[i].outside == "":
				return fmt.Errorf("%w: %s holds %q, which is not a key of a keyshare group (another group below it?); check --prefix and --group; nothing was changed",
					ErrNotGroupRoot, s.Root(), kvs[0].Key)
			default:
				return fmt.Errorf("%w: %s lies inside the group stored at %s (it holds %q); check --prefix and --group; nothing was changed",
					ErrNotGroupRoot, s.Root(), probes[i].outside, kvs[0].Key)
			}
		}
		probes = probes[n:]
	}
	return nil
}
