package schema

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/keyshare/keyshare/internal/textsafe"
)

// Keys builds the etcd keys of one group; Group.Keys makes it.
type Keys struct {
	root   string
	prefix string
	group  string
}

// DefaultPrefix is the etcd prefix of all groups when none is configured.
const DefaultPrefix = "/keyshare"

// Prefix is the prefix the schema was made with.
func (s Keys) Prefix() string { return s.prefix }

// Group is the group's name.
func (s Keys) Group() string { return s.group }

// Root is the group's prefix, ending in "/".
func (s Keys) Root() string { return s.root }

// Members is the prefix of member registrations.
func (s Keys) Members() string { return s.root + "members/" }

// Member is the registration key of member id.
func (s Keys) Member(id string) string { return s.Members() + id }

// Subscriptions is the prefix of the members' topic lists.
func (s Keys) Subscriptions() string { return s.root + "subscriptions/" }

// Subscription is the key of the topics member id consumes.
func (s Keys) Subscription(id string) string { return s.Subscriptions() + id }

// Election is the prefix of the leader election's keys.
func (s Keys) Election() string { return s.root + "election" }

// Generation is the key of the assignment generation.
func (s Keys) Generation() string { return s.root + "generation" }

// Paused is the key that exists while an operator has paused the group.
func (s Keys) Paused() string { return s.root + "paused" }

// Ranges is the prefix of all range records.
func (s Keys) Ranges() string { return s.root + "ranges/" }

// Range is the key of the range of topic/partition starting at hash lo.
func (s Keys) Range(topic string, partition int32, lo uint64) string {
	return fmt.Sprintf("%s%s/%05d/%010d", s.Ranges(), topic, partition, lo)
}

// Ledger is the prefix of all ledger entries.
func (s Keys) Ledger() string { return s.root + "ledger/" }

// LedgerEntry is the ledger key of the range of topic/partition starting at lo.
func (s Keys) LedgerEntry(topic string, partition int32, lo uint64) string {
	return fmt.Sprintf("%s%s/%05d/%010d", s.Ledger(), topic, partition, lo)
}

// Commits is the prefix of the leader's committed offsets.
func (s Keys) Commits() string { return s.root + "commits/" }

// Stuck is the prefix of stuck-range reports.
func (s Keys) Stuck() string { return s.root + "stuck/" }

// StuckRange is the key reporting that the range of topic/partition starting
// at lo is held by a stuck record.
func (s Keys) StuckRange(topic string, partition int32, lo uint64) string {
	return fmt.Sprintf("%s%s/%05d/%010d", s.Stuck(), topic, partition, lo)
}

// Lost is the prefix of retention loss reports.
func (s Keys) Lost() string { return s.root + "lost/" }

// LostRange is the key reporting the records the range of topic/partition
// starting at lo lost when the log started at logStart. A range loses
// records at most once per log start (its ledger then moves past it), so
// the key is unique.
func (s Keys) LostRange(topic string, partition int32, lo uint64, logStart int64) string {
	return fmt.Sprintf("%s%s/%05d/%010d/%020d", s.Lost(), topic, partition, lo, logStart)
}

// ParseLostKey splits a loss report key into its range key fields and the
// log start.
func ParseLostKey(prefix, key string) (topic string, partition int32, lo uint64, logStart int64, err error) {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return "", 0, 0, 0, fmt.Errorf("key %s: want %s<topic>/<partition>/<lo>/<log start>", textsafe.Quote(key), prefix)
	}
	if topic, partition, lo, err = ParseRangeKey(prefix, key[:i]); err != nil {
		return "", 0, 0, 0, fmt.Errorf("loss report key %s: %w", textsafe.Quote(key), err)
	}
	logStart, err = strconv.ParseInt(key[i+1:], 10, 64)
	if err != nil || logStart < 0 || key[i+1:] != fmt.Sprintf("%020d", logStart) {
		return "", 0, 0, 0, fmt.Errorf("key %s: the log start must be written as %%020d", textsafe.Quote(key))
	}
	return topic, partition, lo, logStart, nil
}

// Loads is the prefix of the members' load reports.
func (s Keys) Loads() string { return s.root + "load/" }

// Load is the load report key of member id.
func (s Keys) Load(id string) string { return s.Loads() + id }

// HotKeysPrefix is the prefix of the members' hot key names.
func (s Keys) HotKeysPrefix() string { return s.root + "hotkeys/" }

// HotKeys is the key of member id's hot key names: a directory of its own,
// not under load/, which the leaders of earlier releases read whole and
// would warn about (docs/upgrades.md).
func (s Keys) HotKeys(id string) string { return s.HotKeysPrefix() + id }

// KeyOps is the prefix of the operators' operations on single keys.
func (s Keys) KeyOps() string { return s.root + "keyops/" }

// KeyOp is the key of the operation on record key key of topic/partition,
// whose hash is hash: the hash in 10 digits, so that a partition's
// operations sort by hash as its ranges do, then the key in unpadded
// base64url (any bytes, and "/" never among them). An empty key ends the
// name with "/".
func (s Keys) KeyOp(topic string, partition int32, hash uint32, key []byte) string {
	return fmt.Sprintf("%s%s/%05d/%010d/%s", s.KeyOps(), topic, partition, hash, base64.RawURLEncoding.EncodeToString(key))
}

// Leavings is the prefix of the leaving members' drain budgets.
func (s Keys) Leavings() string { return s.root + "leaving/" }

// Leaving is the drain budget key of leaving member id.
func (s Keys) Leaving(id string) string { return s.Leavings() + id }

// Handoffs is the prefix of the leader's handoff plans for leaving members.
func (s Keys) Handoffs() string { return s.root + "handoffs/" }

// Handoff is the handoff plan key of leaving member id.
func (s Keys) Handoff(id string) string { return s.Handoffs() + id }

// Topics is the prefix of the topic records.
func (s Keys) Topics() string { return s.root + "topics/" }

// Topic is the key of topic's record.
func (s Keys) Topic(topic string) string { return s.Topics() + topic }

// TopicState is the prefix of every key that holds state of topic: its
// range records, ledger entries and commit records (not its loss reports,
// which are history an operator deletes).
func (s Keys) TopicState(topic string) []string {
	return []string{s.Ranges() + topic + "/", s.Ledger() + topic + "/", s.Commits() + topic + "/"}
}

// Commit is the key of topic/partition's committed offset.
func (s Keys) Commit(topic string, partition int32) string {
	return fmt.Sprintf("%s%s/%05d", s.Commits(), topic, partition)
}

// ParseRangeKey splits a range or ledger key (with the given prefix, Ranges()
// or Ledger()) into topic, partition and first hash.
func ParseRangeKey(prefix, key string) (topic string, partition int32, lo uint64, err error) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return "", 0, 0, fmt.Errorf("key %s is not under %s", textsafe.Quote(key), textsafe.Quote(prefix))
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[0] == "" {
		return "", 0, 0, fmt.Errorf("key %s: want %s<topic>/<partition>/<lo>", textsafe.Quote(key), prefix)
	}
	p, err := strconv.ParseInt(parts[1], 10, 32)
	if err != nil || p < 0 {
		return "", 0, 0, fmt.Errorf("key %s: bad partition %s", textsafe.Quote(key), textsafe.Quote(parts[1]))
	}
	l, err := strconv.ParseUint(parts[2], 10, 64)
	if err != nil || l >= 1<<32 {
		return "", 0, 0, fmt.Errorf("key %s: bad range start %s", textsafe.Quote(key), textsafe.Quote(parts[2]))
	}
	if key != fmt.Sprintf("%s%s/%05d/%010d", prefix, parts[0], p, l) {
		return "", 0, 0, fmt.Errorf("key %s: partition and range start must be written as %%05d and %%010d", textsafe.Quote(key))
	}
	return parts[0], int32(p), l, nil
}

// ParseCommitKey splits a commit key into topic and partition.
func ParseCommitKey(prefix, key string) (topic string, partition int32, err error) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return "", 0, fmt.Errorf("key %s is not under %s", textsafe.Quote(key), textsafe.Quote(prefix))
	}
	t, ps, ok := strings.Cut(rest, "/")
	p, perr := strconv.ParseInt(ps, 10, 32)
	if !ok || t == "" || perr != nil || p < 0 || ps != fmt.Sprintf("%05d", p) {
		return "", 0, fmt.Errorf("key %s: want %s<topic>/<partition> with the partition as %%05d", textsafe.Quote(key), prefix)
	}
	return t, int32(p), nil
}

// CheckName reports whether name can be a path element of a key: a group
// name, a member id or a topic. Its error quotes the name cut to
// textsafe.MaxKey bytes, as the parsers here quote keys: a name or key
// read from etcd may be megabytes long.
func CheckName(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%s is empty", what)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("%s %s contains '/' or NUL; choose a name without them", what, textsafe.Quote(name))
	case len(name) > 249:
		return fmt.Errorf("%s %s is longer than 249 bytes", what, textsafe.Quote(name))
	}
	return nil
}
