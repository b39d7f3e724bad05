package main

import "github.com/keyshare/keyshare/cmd/internal/cli"

// commandHelp is what `keyshare <command> -h` and `keyshare help <command>`
// print above the flags, by the command's flag set name.
var commandHelp = map[string]cli.CommandHelp{
	"demo": {
		Description: `Runs the bundled cluster (embedded etcd and an in-process Kafka-protocol broker, or Apache Kafka with --kafka apache), a producer and several member processes (every member delivers its records over HTTP to an endpoint the demo runs, which spends up to --work on each); kills one member and starts another on the way, prints a line a second, says when a partition is shared by several members (with each one's ranges) and where each member serves its metrics, waits for the committed offsets to reach the end, then checks from the endpoint's record logs that no record was lost and each key's records ran in order. Exit status 1 if a check failed.`,
		Example:     `keyshare demo --duration 20s --members 4 --work 5ms`,
	},
	"cluster": {
		Description: `Runs embedded etcd and a Kafka-protocol broker until interrupted, with the given topics, and prints the endpoints and commands to try: a cluster for your own members on one machine. Nothing here is for production.`,
		Example:     `keyshare cluster --topic orders:4 --data-dir /tmp/ks`,
	},
	"produce": {
		Description: `Writes keyed records whose values carry a per-key sequence number (key-K:SEQ), so that a consumer's order per key can be checked; --zipf skews the keys, --rate paces the writes.`,
		Example:     `keyshare produce --brokers localhost:9092 --topic orders --count 100000 --keys 1000`,
	},
	"member": {
		Description: `Runs one keyshare member until SIGINT or SIGTERM, which leave gracefully: it joins the group in etcd, takes the key-hash ranges the leader gives it and delivers their records to an HTTP(S) endpoint in any language (--deliver, required; docs/delivery.md). Simulated work for tests and benchmarks is keyshare-bench member's. Every setting of the library's consumer.Config has a flag; a bad value is refused before any connection, naming the flag. Give every member of a group the same --ttl, --drain-timeout and load settings.`,
		Example: `keyshare member --brokers localhost:9092 --etcd localhost:2379 --group orders-app --topic orders --deliver http://localhost:8080/records
keyshare member --group orders-app --topic orders --deliver https://sink:8443/records --deliver-token-file /run/secrets/sink-token --dlq orders.dlq
KEYSHARE_ETCD=etcd:2379 keyshare member --group orders-app --topic orders --deliver http://localhost:8080/records --weight 2 --auto-offset-reset latest`,
	},
	"status": {
		Description: `Shows a group's leader, members, generation and, per partition, its ranges with owner, state, watermark and pending records, the safe watermark, committed and end offsets and lag; below the table, what holds back a stuck range and any records Kafka deleted before they were handled. Reads etcd (and Kafka with --brokers) only.`,
		Example:     `keyshare status --etcd localhost:2379 --group orders-app --brokers localhost:9092 --watch`,
	},
	"group describe": {
		Description: `Shows the group as keyshare status does.`,
		Example:     `keyshare group describe --etcd localhost:2379 --group orders-app`,
	},
	"group reset-offsets": {
		Description: `Moves where the group's ranges resume, per topic or partition: prints the plan (current, new, log start and end) and, with --execute, writes it to etcd and Kafka. Refused while members run unless the group is paused (keyshare group pause).`,
		Example:     `keyshare group reset-offsets --etcd localhost:2379 --brokers localhost:9092 --group orders-app --topic orders --to-datetime 2026-01-02T15:04:05Z --execute`,
	},
	"group pause": {
		Description: `Makes the group's members stop taking records (they keep their ranges and finish what they started), for example before resetting offsets; keyshare group resume undoes it.`,
		Example:     `keyshare group pause --etcd localhost:2379 --group orders-app --reason "reset after bad deploy"`,
	},
	"group resume": {
		Description: `Lets a paused group's members take records again.`,
		Example:     `keyshare group resume --etcd localhost:2379 --group orders-app`,
	},
	"group delete": {
		Description: `Removes the group's etcd state (with --kafka-offsets, also its committed offsets in Kafka). Refused while members run.`,
		Example:     `keyshare group delete --etcd localhost:2379 --group orders-app`,
	},
	"key describe": {
		Description: `Shows what the group knows of one key: its partition (--partition, or computed as the producer placed it: --partitioner), its key hash, the member and range that own it with the range's watermark, the offsets of its records the range's ledger has not seen handled (read from Kafka from the watermark, at most --max-scan records), and the error holding it when its owner reports it stuck. Reads etcd and Kafka only; changes nothing.`,
		Example:     `keyshare key describe --etcd localhost:2379 --brokers localhost:9092 --group orders-app --topic orders customer-42`,
		Args:        "KEY",
	},
	"key skip": {
		Description: `Has the key's owner skip its head record --offset (the record its stuck report names, or its lowest pending offset: keyshare key describe): at the record's next attempt the owner writes it to the dead-letter topic with a cause naming the operator, or drops it with --drop, counts it done, and the key's later records run. Stored in etcd until applied, whichever member owns the key then. Refuses, changing nothing, an offset that is not the key's head.`,
		Example:     `keyshare key skip --etcd localhost:2379 --brokers localhost:9092 --group orders-app --topic orders --offset 1234 --reason "customer deleted" customer-42`,
		Args:        "KEY",
	},
	"key park": {
		Description: `Parks a key: its owner, whichever member that is now or later, copies each of the key's records in order to the parking topic (--park-topic, default the topic with .keyshare-parked, created if absent with the topic's partition count), into the partition of the same number with its origin in keyshare's headers, and counts it done once the copy is acknowledged, so the committed offset moves on; other keys go on. Refuses, changing nothing, a key that already has an operation.`,
		Example:     `keyshare key park --etcd localhost:2379 --brokers localhost:9092 --group orders-app --topic orders --reason "bad upstream data" customer-42`,
		Args:        "KEY",
	},
	"key unpark": {
		Description: `Unparks a parked key: before the key's next live record (or at once, with none), its owner handles the key's parked records in their original order, read from the parking topic from where the park began, recording its progress in etcd so that a range moved meanwhile resumes there; then the key's newer records run. Refuses a key that is not parked.`,
		Example:     `keyshare key unpark --etcd localhost:2379 --brokers localhost:9092 --group orders-app --topic orders customer-42`,
		Args:        "KEY",
	},
	"key replay": {
		Description: `Has the key's owner run the key's records from --from again, in order, up to its next live record, before that record; the ledger and the committed offset are not touched. Progress is kept in etcd, so a range moved meanwhile resumes at the new owner. Refuses, changing nothing, an offset below the log start or above the key's handled position, and a key that already has an operation.`,
		Example:     `keyshare key replay --etcd localhost:2379 --brokers localhost:9092 --group orders-app --topic orders --from 1200 customer-42`,
		Args:        "KEY",
	},
	"key cancel": {
		Description: `Deletes the operation set on the key (keyshare key skip) and prints it. Refuses a key with none.`,
		Example:     `keyshare key cancel --etcd localhost:2379 --brokers localhost:9092 --group orders-app --topic orders customer-42`,
		Args:        "KEY",
	},
	"key delete-state": {
		Description: `Deletes the key's keyed state (docs/state.md): appends to its changelog (--changelog, default GROUP-TOPIC-state) a tombstone at the applied offset and token of the key's last change, which wins over it under the restore rule. The group must be paused (keyshare group pause) or stopped; refused, changing nothing, while it has live members and is not paused, and for a key without state. When a live member owns the key's range, waits up to --wait (default 30s) for the owner to hand the tombstone back, its word that it holds the deletion, and fails naming the owner if it does not: restart that member before resuming the group, or run again with a longer --wait (a key deleted already is then waited for, not deleted again). A change of the key that lands after the tombstone and wins over it is an error naming both offsets: check that the group is paused and run again.`,
		Example: `keyshare group pause --etcd localhost:2379 --group orders-app
keyshare key delete-state --etcd localhost:2379 --brokers localhost:9092 --group orders-app --topic orders customer-42
keyshare group resume --etcd localhost:2379 --group orders-app`,
		Args: "KEY",
	},
	"completion": {
		Description: `Prints a completion script for bash, zsh or fish: commands, group's subcommands and each command's flags. Load it in the shell's startup file, or save it where the shell looks for completions.`,
		Example: `source <(keyshare completion bash)
keyshare completion zsh > "${fpath[1]}/_keyshare"
keyshare completion fish > ~/.config/fish/completions/keyshare.fish`,
	},
	"version": {
		Description: `Prints the module version the binary was built from, its commit (and whether the checkout had uncommitted changes) and the Go version. keyshare --version prints the same.`,
		Example:     `keyshare version`,
	},
}
