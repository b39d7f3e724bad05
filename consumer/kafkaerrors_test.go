package consumer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keyshare/keyshare/coord"
)

// TestKafkaErrorClassification: the errors a broker gives while it starts,
// moves a coordinator or elects a leader (and those of a broker not
// reachable yet) are retried; credentials, permissions and configuration
// are not. No message is empty: each names the Kafka error code.
func TestKafkaErrorClassification(t *testing.T) {
	cases := []struct {
		name      string
		err       error
		retriable bool
		want      []string // in the message
	}{
		{"describe group, NOT_COORDINATOR, empty broker message", kafka.NewError(kafka.ErrNotCoordinator, "ConsumerGroupDescribe: ", false), true,
			[]string{"ConsumerGroupDescribe: Kafka error NOT_COORDINATOR (16, Broker: Not coordinator)", "retries"}},
		{"no message at all", kafka.NewError(kafka.ErrNotCoordinator, "", false), true, []string{"Kafka error NOT_COORDINATOR (16"}},
		{"COORDINATOR_LOAD_IN_PROGRESS", kafka.NewError(kafka.ErrCoordinatorLoadInProgress, "", false), true, []string{"COORDINATOR_LOAD_IN_PROGRESS (14"}},
		{"COORDINATOR_NOT_AVAILABLE", kafka.NewError(kafka.ErrCoordinatorNotAvailable, "", false), true, []string{"COORDINATOR_NOT_AVAILABLE (15"}},
		{"LEADER_NOT_AVAILABLE", kafka.NewError(kafka.ErrLeaderNotAvailable, "Broker: Leader not available", false), true,
			[]string{"Broker: Leader not available: Kafka error LEADER_NOT_AVAILABLE (5): a partition leader"}},
		{"NOT_LEADER_OR_FOLLOWER", kafka.NewError(kafka.ErrNotLeaderForPartition, "", false), true, []string{"NOT_LEADER_OR_FOLLOWER (6"}},
		{"REQUEST_TIMED_OUT", kafka.NewError(kafka.ErrRequestTimedOut, "", false), true, []string{"REQUEST_TIMED_OUT (7"}},
		{"broker not reachable", kafka.NewError(kafka.ErrTransport, "Connect to ipv4#127.0.0.1:1 failed: Connection refused", false), true,
			[]string{"Connection refused: Kafka error _TRANSPORT (-195", "not reachable yet"}},
		{"all brokers down", kafka.NewError(kafka.ErrAllBrokersDown, "", false), true, []string{"_ALL_BROKERS_DOWN"}},
		{"librdkafka timed out", kafka.NewError(kafka.ErrTimedOut, "Failed while waiting for controller: Local: Timed out", false), true, []string{"_TIMED_OUT (-185)"}},
		{"a code keyshare does not list is retried", kafka.NewError(kafka.ErrUnknown, "", false), true, []string{"Kafka error code -1 (-1", "keyshare retries"}},
		{"wrapped", fmt.Errorf("read committed offsets: %w", kafka.NewError(kafka.ErrNotCoordinator, "", false)), true, []string{"read committed offsets: Broker: Not coordinator: Kafka error NOT_COORDINATOR (16)"}},
		{"attempt timed out", fmt.Errorf("describe: %w", context.DeadlineExceeded), true, []string{"no answer in time"}},

		{"SASL refused", kafka.NewError(kafka.ErrAuthentication, "SASL authentication error: Authentication failed", false), false, []string{"_AUTHENTICATION (-169", "sasl.password"}},
		{"SASL_AUTHENTICATION_FAILED", kafka.NewError(kafka.ErrSaslAuthenticationFailed, "", false), false, []string{"SASL_AUTHENTICATION_FAILED (58"}},
		{"TLS", kafka.NewError(kafka.ErrSsl, "SSL handshake failed: certificate verify failed", false), false, []string{"_SSL (-181", "ssl.ca.location"}},
		{"topic ACL", kafka.NewError(kafka.ErrTopicAuthorizationFailed, "", false), false, []string{"TOPIC_AUTHORIZATION_FAILED (29", "grant"}},
		{"group ACL", kafka.NewError(kafka.ErrGroupAuthorizationFailed, "ConsumerGroupDescribe: ", false), false, []string{"GROUP_AUTHORIZATION_FAILED (30", "grant"}},
		{"cluster ACL", kafka.NewError(kafka.ErrClusterAuthorizationFailed, "", false), false, []string{"CLUSTER_AUTHORIZATION_FAILED (31"}},
		{"bad config", kafka.NewError(kafka.ErrInvalidConfig, "", false), false, []string{"INVALID_CONFIG (40"}},
		{"librdkafka fatal", kafka.NewError(kafka.ErrUnknown, "fenced", true), false, []string{"restart the member"}},
		{"marked final", final(errors.New(`consumer: topic "t" does not exist`)), false, []string{`topic "t" does not exist`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := explainKafka(tc.err)
			if got := retriable(err); got != tc.retriable {
				t.Errorf("retriable(%v) = %v, want %v", err, got, tc.retriable)
			}
			msg := err.Error()
			if strings.HasSuffix(strings.TrimSpace(msg), ":") || msg == "" {
				t.Errorf("message %q ends without saying what was wrong", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
			if explainKafka(err).Error() != msg {
				t.Errorf("explaining twice changes the message: %q", explainKafka(err).Error())
			}
		})
	}
}

// TestRefusals: a refusal the broker states counts at once; a TLS failure
// or a broken-off SASL handshake the second time (once, it can be a broker
// stopping mid-handshake); an unreachable broker never.
func TestRefusals(t *testing.T) {
	auth := kafka.NewError(kafka.ErrAuthentication, "SASL authentication error: Authentication failed: Invalid username or password", false)
	broken := kafka.NewError(kafka.ErrTransport, "sasl_plaintext://127.0.0.1:1/bootstrap: SASL authentication error: SaslAuthenticateRequest failed: Local: Broker transport failure", false)
	tls := kafka.NewError(kafka.ErrSsl, "SSL handshake failed: certificate verify failed", false)
	down := kafka.NewError(kafka.ErrAllBrokersDown, "1/1 brokers are down", false)
	refused := kafka.NewError(kafka.ErrTransport, "Connect to ipv4#127.0.0.1:1 failed: Connection refused", false)
	for _, tc := range []struct {
		name   string
		events []kafka.Error
		at     int // index of the event that counts; -1: none
	}{
		{"stated refusal", []kafka.Error{down, auth}, 1},
		{"broken-off SASL handshake", []kafka.Error{broken, down, broken}, 2},
		{"TLS", []kafka.Error{tls, tls}, 1},
		{"unreachable", []kafka.Error{refused, down, refused, down}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r refusals
			got := -1
			for i, ev := range tc.events {
				if err := r.add(ev); err != nil {
					got = i
					if !strings.Contains(err.Error(), "check") {
						t.Errorf("refusal %q does not say what to check", err)
					}
					break
				}
			}
			if got != tc.at {
				t.Errorf("refusal counted at event %d, want %d", got, tc.at)
			}
		})
	}
}

// TestEtcdTransient: the first join of a member retries an etcd that is
// unreachable or electing a leader, and stops on credentials, permissions
// and a member id in use.
func TestEtcdTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("coord: cannot open an etcd session within 10s: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("coord: register member: %w", rpctypes.ErrNoLeader), true},
		{fmt.Errorf("coord: register member: %w", rpctypes.ErrLeaderChanged), true},
		{fmt.Errorf("coord: register member: %w", status.Error(codes.Unavailable, "connection refused")), true},
		{fmt.Errorf("coord: register member: %w", rpctypes.ErrAuthFailed), false},
		{fmt.Errorf("coord: register member: %w", rpctypes.ErrPermissionDenied), false},
		{fmt.Errorf("coord: register member: %w", coord.ErrMemberExists), false},
		{errors.New("coord: no topics: set Config.Topics to at least one topic"), false},
	} {
		if got := etcdTransient(tc.err); got != tc.want {
			t.Errorf("etcdTransient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestProblemsLogOncePerMinute: a problem that lasts is logged once (per
// problemLogInterval), a different problem at once, and its end once;
// meanwhile the problems say what fails, for /readyz.
func TestProblemsLogOncePerMinute(t *testing.T) {
	var buf bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info})
	var ps problems
	notCoord := explainKafka(kafka.NewError(kafka.ErrNotCoordinator, "ConsumerGroupDescribe: ", false))
	for range 5 {
		ps.report(log, "describe the group", notCoord)
	}
	ps.report(log, "describe the group", explainKafka(kafka.NewError(kafka.ErrCoordinatorLoadInProgress, "", false)))
	ps.report(log, "read the topics' metadata", explainKafka(kafka.NewError(kafka.ErrLeaderNotAvailable, "", false)))
	// No answer in time, whether librdkafka or the attempt gave up first:
	// one problem.
	ps.report(log, "join", explainKafka(kafka.NewError(kafka.ErrTimedOut, "Failed while waiting for controller: Local: Timed out", false)))
	ps.report(log, "join", explainKafka(fmt.Errorf("read: %w", context.DeadlineExceeded)))
	if s := ps.String(); !strings.Contains(s, "describe the group") || !strings.Contains(s, "COORDINATOR_LOAD_IN_PROGRESS") || !strings.Contains(s, "LEADER_NOT_AVAILABLE") {
		t.Errorf("problems %q do not name both calls and their last errors", s)
	}
	ps.resolve("describe the group", log)
	ps.resolve("read the topics' metadata", log)
	ps.resolve("join", nil)
	if s := ps.String(); s != "" {
		t.Errorf("problems after both resolved: %q", s)
	}
	out := buf.String()
	if n := strings.Count(out, "NOT_COORDINATOR"); n != 1 {
		t.Errorf("NOT_COORDINATOR logged %d times, want once:\n%s", n, out)
	}
	for _, want := range []string{"COORDINATOR_LOAD_IN_PROGRESS", "LEADER_NOT_AVAILABLE", "describe the group: done after 6 failed attempts", "cannot join yet"} {
		if strings.Count(out, want) != 1 {
			t.Errorf("log has %q %d times, want once:\n%s", want, strings.Count(out, want), out)
		}
	}
}
