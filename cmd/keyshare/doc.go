// Command keyshare runs keyshare members, the bundled demo cluster, a load
// generator and a status view. Each subcommand lives in its own file and is
// a thin layer over the library: member over consumer, status over coord's
// ReadSnapshot, group over admin.
//
//	keyshare demo                       # embedded etcd, in-process Kafka, producer, members, live view
//	keyshare cluster                    # just the embedded etcd and Kafka, for your own members
//	keyshare member --brokers localhost:9092 --etcd localhost:2379 \
//	        --group orders-app --topic orders
//	keyshare status --etcd localhost:2379 --group orders-app
//	keyshare group reset-offsets ...    # with no member running
//
// Run 'keyshare <command> -h' for a command's flags.
package main
