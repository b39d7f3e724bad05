package membercmd

// --state: the member keeps each key's state for the --deliver endpoint
// through package statestore, sends it with each record and takes the
// new state from the answer (docs/delivery.md, "Keyed state").

import (
	"context"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/deliver"
	"github.com/keyshare/keyshare/statestore"
)

// openState makes the Store of the group's keyed state: each input
// topic's changelog checked, or created compacted, and its producer open;
// in memory, or on disk in dir (--state-dir). The caller closes it once
// the consumer's Run has returned.
func openState(ctx context.Context, cfg consumer.Config, dir string) (*statestore.Store, error) {
	return statestore.New(ctx, statestore.Config{
		Group:  cfg.Group,
		Topics: cfg.Topics,
		Kafka:  cfg.Kafka,
		Dir:    dir,
		Logger: cfg.Logger.Named("state"),
	})
}

// keyStateOf is deliver.Config.KeyState for handlers wrapped by a Store:
// the Store's Key of m, or no state at all (never a nil *Key, which as a
// deliver.KeyState would not be nil).
func keyStateOf(ctx context.Context, m *kafka.Message) deliver.KeyState {
	if k := statestore.KeyOf(ctx, m); k != nil {
		return k
	}
	return nil
}

// withState wraps cfg's handler (the endpoint's) with store, so that the
// record's key state is restored before it is sent, a record its key has
// applied is skipped, and the answer's change is appended to the
// changelog before the record counts done.
func withState(store *statestore.Store, cfg *consumer.Config) {
	if cfg.BatchHandler != nil {
		cfg.BatchHandler = store.BatchHandler(cfg.BatchHandler)
		return
	}
	cfg.Handler = store.Handler(cfg.Handler)
}
