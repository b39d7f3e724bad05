package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Which Kafka errors a retry can fix.
//
// A broker that is starting, moving a group coordinator or electing
// partition leaders answers for a while with errors such as
// NOT_COORDINATOR, and librdkafka does not retry all of them itself (it
// hands ConsumerGroupDescribe's NOT_COORDINATOR back, with an empty
// message, not flagged retriable). A member retries those for as long as
// it runs; only what no retry can fix (authentication, authorization, a
// configuration the broker refuses) ends Run.

// kafkaCode is what keyshare knows about one Kafka error code.
type kafkaCode struct {
	name       string // the protocol's name (librdkafka's for its local codes)
	definitive bool   // no retry can fix it
	advice     string // what it means for a member, and what to do
}

const (
	adviceStarting = "the broker is starting, or moving the group's coordinator; keyshare retries"
	adviceLeader   = "a partition leader is being elected or moved; keyshare retries"
	adviceNetwork  = "the broker is not reachable yet; keyshare retries (check bootstrap.servers if this lasts)"
	adviceAuth     = "the broker refused the credentials: check security.protocol, sasl.mechanism, sasl.username and sasl.password"
	adviceTLS      = "TLS with the broker failed: check ssl.ca.location and the client certificate (ssl.certificate.location, ssl.key.location)"
)

// kafkaCodes classifies the codes a member's calls meet. A code not listed
// is retried: a member gives up only on what is known to be definitive.
var kafkaCodes = map[kafka.ErrorCode]kafkaCode{
	// A broker starting, a coordinator loading or moving.
	kafka.ErrNotCoordinator:            {name: "NOT_COORDINATOR", advice: adviceStarting},
	kafka.ErrCoordinatorNotAvailable:   {name: "COORDINATOR_NOT_AVAILABLE", advice: adviceStarting},
	kafka.ErrCoordinatorLoadInProgress: {name: "COORDINATOR_LOAD_IN_PROGRESS", advice: adviceStarting},
	kafka.ErrNotController:             {name: "NOT_CONTROLLER", advice: adviceStarting},
	kafka.ErrRebalanceInProgress:       {name: "REBALANCE_IN_PROGRESS", advice: adviceStarting},
	kafka.ErrUnstableOffsetCommit:      {name: "UNSTABLE_OFFSET_COMMIT", advice: "a transaction's offset commit is still open; keyshare retries"},
	// Leaders being elected or moved.
	kafka.ErrLeaderNotAvailable:          {name: "LEADER_NOT_AVAILABLE", advice: adviceLeader},
	kafka.ErrNotLeaderForPartition:       {name: "NOT_LEADER_OR_FOLLOWER", advice: adviceLeader},
	kafka.ErrReplicaNotAvailable:         {name: "REPLICA_NOT_AVAILABLE", advice: adviceLeader},
	kafka.ErrNotEnoughReplicas:           {name: "NOT_ENOUGH_REPLICAS", advice: adviceLeader},
	kafka.ErrFencedLeaderEpoch:           {name: "FENCED_LEADER_EPOCH", advice: adviceLeader},
	kafka.ErrUnknownLeaderEpoch:          {name: "UNKNOWN_LEADER_EPOCH", advice: adviceLeader},
	kafka.ErrOffsetNotAvailable:          {name: "OFFSET_NOT_AVAILABLE", advice: adviceLeader},
	kafka.ErrPreferredLeaderNotAvailable: {name: "PREFERRED_LEADER_NOT_AVAILABLE", advice: adviceLeader},
	kafka.ErrKafkaStorageError:           {name: "KAFKA_STORAGE_ERROR", advice: adviceLeader},
	// Brokers not reachable, or slow.
	kafka.ErrRequestTimedOut:         {name: "REQUEST_TIMED_OUT", advice: "the broker did not answer in time; keyshare retries"},
	kafka.ErrNetworkException:        {name: "NETWORK_EXCEPTION", advice: adviceNetwork},
	kafka.ErrBrokerNotAvailable:      {name: "BROKER_NOT_AVAILABLE", advice: adviceNetwork},
	kafka.ErrThrottlingQuotaExceeded: {name: "THROTTLING_QUOTA_EXCEEDED", advice: "the broker throttles this client; keyshare retries"},
	kafka.ErrTransport:               {name: "_TRANSPORT", advice: adviceNetwork},
	kafka.ErrAllBrokersDown:          {name: "_ALL_BROKERS_DOWN", advice: adviceNetwork},
	kafka.ErrResolve:                 {name: "_RESOLVE", advice: adviceNetwork},
	kafka.ErrFail:                    {name: "_FAIL", advice: adviceNetwork},
	kafka.ErrTimedOut:                {name: "_TIMED_OUT", advice: "no answer in time (is the broker reachable?); keyshare retries"},
	kafka.ErrTimedOutQueue:           {name: "_TIMED_OUT_QUEUE", advice: "no answer in time (is the broker reachable?); keyshare retries"},
	kafka.ErrWaitCoord:               {name: "_WAIT_COORD", advice: adviceStarting},

	// Definitive: credentials, permissions, configuration.
	kafka.ErrAuthentication:                     {name: "_AUTHENTICATION", definitive: true, advice: adviceAuth},
	kafka.ErrSaslAuthenticationFailed:           {name: "SASL_AUTHENTICATION_FAILED", definitive: true, advice: adviceAuth},
	kafka.ErrUnsupportedSaslMechanism:           {name: "UNSUPPORTED_SASL_MECHANISM", definitive: true, advice: "the broker does not offer this SASL mechanism: check sasl.mechanism"},
	kafka.ErrIllegalSaslState:                   {name: "ILLEGAL_SASL_STATE", definitive: true, advice: adviceAuth},
	kafka.ErrSsl:                                {name: "_SSL", definitive: true, advice: adviceTLS},
	kafka.ErrTopicAuthorizationFailed:           {name: "TOPIC_AUTHORIZATION_FAILED", definitive: true, advice: "the principal may not use the topic: grant it Describe and Read on the topics (docs/security.md)"},
	kafka.ErrGroupAuthorizationFailed:           {name: "GROUP_AUTHORIZATION_FAILED", definitive: true, advice: "the principal may not use the group: grant it Describe and Read on the group id (docs/security.md)"},
	kafka.ErrClusterAuthorizationFailed:         {name: "CLUSTER_AUTHORIZATION_FAILED", definitive: true, advice: "the principal may not do this on the cluster: check its ACLs (docs/security.md)"},
	kafka.ErrTransactionalIDAuthorizationFailed: {name: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", definitive: true, advice: "the principal may not use the transactional id: check its ACLs"},
	kafka.ErrDelegationTokenAuthorizationFailed: {name: "DELEGATION_TOKEN_AUTHORIZATION_FAILED", definitive: true, advice: "the principal may not use delegation tokens: check its ACLs"},
	kafka.ErrSecurityDisabled:                   {name: "SECURITY_DISABLED", definitive: true, advice: "the broker has security features disabled: check security.protocol"},
	kafka.ErrInvalidConfig:                      {name: "INVALID_CONFIG", definitive: true, advice: "the broker refused the configuration: check the Kafka settings"},
	kafka.ErrInvalidArg:                         {name: "_INVALID_ARG", definitive: true, advice: "librdkafka refused an argument or setting: check the Kafka settings"},
	kafka.ErrInvalidGroupID:                     {name: "INVALID_GROUP_ID", definitive: true, advice: "the broker refuses the group id: choose another Config.Group (--group)"},
	kafka.ErrUnsupportedVersion:                 {name: "UNSUPPORTED_VERSION", definitive: true, advice: "the broker does not support this request: see the tested versions in docs/compatibility.md"},
	kafka.ErrUnsupportedFeature:                 {name: "_UNSUPPORTED_FEATURE", definitive: true, advice: "the broker does not support what keyshare needs (docs/compatibility.md)"},
	kafka.ErrFatal:                              {name: "_FATAL", definitive: true, advice: "librdkafka hit a fatal error: restart the member"},
}

// kafkaDefinitive reports whether err is a Kafka error no retry can fix.
// An error without a Kafka code (a context's, or a plain one) is not.
func kafkaDefinitive(err error) bool {
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return false
	}
	return ke.IsFatal() || kafkaCodes[ke.Code()].definitive
}

// kafkaCodeName is the protocol's name of code, or its number.
func kafkaCodeName(code kafka.ErrorCode) string {
	if c, ok := kafkaCodes[code]; ok {
		return c.name
	}
	return fmt.Sprintf("code %d", int(code))
}

// explainKafka returns err with a message that names the Kafka error code
// (the broker's own message is often empty) and says what it means and
// what to do. nil stays nil; an error explained already, or one without a
// Kafka code, is returned as it is, but for a timeout, which says that
// keyshare retries.
func explainKafka(err error) error {
	var ke kafka.Error
	var done *explainedError
	switch {
	case err == nil || errors.As(err, &done):
		return err
	case errors.As(err, &ke):
		return &explainedError{err: err, msg: kafkaMessage(err, ke.Code())}
	case errors.Is(err, context.DeadlineExceeded):
		return &explainedError{err: err, msg: err.Error() + " (no answer in time: is the broker reachable? keyshare retries)"}
	}
	return err
}

// explainedError is an error with explainKafka's message.
type explainedError struct {
	err error
	msg string
}

func (e *explainedError) Error() string { return e.msg }
func (e *explainedError) Unwrap() error { return e.err }

// kafkaMessage is err's message, never empty: librdkafka's, then the
// code's name and number, then what it means for a member.
func kafkaMessage(err error, code kafka.ErrorCode) string {
	// librdkafka puts the request's name before the broker's message
	// ("ConsumerGroupDescribe: "), and the broker's may be empty.
	msg := strings.TrimSuffix(strings.TrimSpace(err.Error()), ":")
	var b strings.Builder
	if msg != "" {
		b.WriteString(msg)
		b.WriteString(": ")
	}
	fmt.Fprintf(&b, "Kafka error %s (%d", kafkaCodeName(code), int(code))
	if desc := code.String(); desc != "" && !strings.Contains(msg, desc) {
		b.WriteString(", ")
		b.WriteString(desc) // librdkafka's words: "Broker: Not coordinator"
	}
	b.WriteString("): ")
	c, known := kafkaCodes[code]
	switch {
	case known:
		b.WriteString(c.advice)
	case kafkaDefinitive(err):
		b.WriteString("librdkafka cannot go on: restart the member")
	default:
		b.WriteString("keyshare retries")
	}
	return b.String()
}

// refusals tells, from the errors librdkafka reports as events, when the
// brokers refused this client's login. A refusal the broker states
// (librdkafka's _AUTHENTICATION) counts at once. A TLS failure, or a SASL
// handshake the broker broke off (kfake closes the connection on a wrong
// password; librdkafka reports a transport failure "SASL authentication
// error"), counts the second time: once, it can be a broker that stopped
// in the middle of a handshake.
type refusals struct{ seen map[kafka.ErrorCode]int }

// add counts ke and returns the refusal once it counts, else nil.
func (r *refusals) add(ke kafka.Error) error {
	broken := !kafkaDefinitive(ke) && strings.Contains(ke.Error(), "SASL authentication error")
	if !broken && !kafkaDefinitive(ke) {
		return nil
	}
	if r.seen == nil {
		r.seen = make(map[kafka.ErrorCode]int)
	}
	r.seen[ke.Code()]++
	if (broken || ke.Code() == kafka.ErrSsl) && r.seen[ke.Code()] < 2 {
		return nil
	}
	if broken {
		return fmt.Errorf("%w: %s", ke, adviceAuth)
	}
	return explainKafka(ke)
}
