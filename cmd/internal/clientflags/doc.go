// Package clientflags holds the connection flags shared by every command
// of both binaries (keyshare, keyshare-bench) that talks to etcd or Kafka,
// after etcdctl (--cacert, --cert, --key, --user) and kcat (-X, -F):
//
//	--etcd E --etcd-cacert CA --etcd-cert C --etcd-key K --etcd-user U
//	  (password from $KEYSHARE_ETCD_PASSWORD or --etcd-password-file)
//	--brokers B -X prop=value ... --kafka-config FILE
//
// No secret is ever a flag value (ps shows those): the etcd password comes
// from the environment or a file, Kafka secrets belong in --kafka-config.
// Each flag set's checks run before any network and return usage errors
// (cli.Usage) naming the flag.
package clientflags
