package group

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/IBM/sarama"
)

// Sentinel errors callers may branch on with errors.Is.
var (
	// ErrPanic wraps a panic recovered from Do, New or Split.
	ErrPanic = errors.New("group: handler panicked")
	// ErrConnect wraps a failure to reach the brokers when Run starts.
	ErrConnect = errors.New("group: cannot reach brokers")
	// ErrRunTwice is returned by a second call of Run.
	ErrRunTwice = errors.New("group: Run called twice")

	// ErrAuth: the brokers refused the client's credentials (SASL). Run
	// returns it, wrapping sarama's error; retrying cannot help.
	ErrAuth = errors.New("group: authentication failed")
	// ErrNotAuthorized: an ACL denies the group or a topic (or the
	// cluster) to this client. Run returns it, wrapping sarama's error.
	ErrNotAuthorized = errors.New("group: not authorized")
	// ErrUnknownTopic: a topic of Config.Topics does not exist (and
	// DefaultSarama does not ask brokers to create it). Run returns it,
	// in an *UnknownTopicError when it finds so as it starts.
	ErrUnknownTopic = errors.New("group: topic does not exist")
	// ErrDeadLetterTopic: Config.DeadLetterTopic does not exist. Run
	// returns it at start, in an *UnknownTopicError that wraps
	// ErrUnknownTopic too, rather than retry every dead letter's write
	// for ever.
	ErrDeadLetterTopic = errors.New("group: dead-letter topic does not exist")
	// ErrSessionTimeout: the coordinator refuses
	// Sarama.Consumer.Group.Session.Timeout (outside its
	// group.min.session.timeout.ms and group.max.session.timeout.ms).
	// Run returns it, wrapping sarama's error; retrying cannot help.
	ErrSessionTimeout = errors.New("group: the coordinator refuses the session timeout")
	// ErrInstanceFenced: another consumer joined the group with this
	// member's InstanceID, the coordinator fenced this one
	// (FENCED_INSTANCE_ID), and that consumer still held the ID two
	// session timeouts later. Run returns it, naming the member that holds the ID,
	// as the Java client and librdkafka end a fenced consumer. Brokers
	// before 2.4 do not say who holds an InstanceID: there Run keeps
	// joining, refused, until the ID is free.
	ErrInstanceFenced = errors.New("group: another member holds this InstanceID")

	// ErrRevoked is the context.Cause of a Do call's ctx when a partition
	// of its items was revoked and DrainTimeout passed: the partition's
	// new owner may already be handling the same messages.
	ErrRevoked = errors.New("group: partition revoked and DrainTimeout passed")
	// ErrShutdown is the context.Cause of a Do call's ctx when Run gives up
	// on in-flight work (its ctx ended and DrainTimeout passed).
	ErrShutdown = errors.New("group: Run is giving up on in-flight work")
	// ErrTimeout is the context.Cause of a Do call's ctx when the call ran
	// past Config.MsgTimeout.
	ErrTimeout = errors.New("group: Do ran past MsgTimeout")

	// ErrRejected, wrapped in the error Do returns, says that the batch
	// holds a message that can never succeed without saying which (a bulk
	// write refused as a whole for one bad row). The group calls Do again
	// at once on halves of the batch, charging no attempt, until each
	// rejected message stands alone, and dead-letters that one (reason
	// rejected), as BatchError.DeadLetter does; its batch mates are
	// handled by the calls that succeed. It halves so even during an
	// outage, when a plain error is not split (the outage's probe may be
	// the rejected batch), and a rejection counts as no failure of the
	// dependency.
	ErrRejected = errors.New("group: batch rejected")
)

// UnknownTopicError is the error Run ends with when, as it starts, a
// topic it was given does not exist (or the brokers call its name
// invalid). It wraps ErrUnknownTopic, ErrDeadLetterTopic too when the
// topic is Config.DeadLetterTopic, and sarama's error, and names each
// missing topic once.
type UnknownTopicError struct {
	Group string // Config.GroupID
	// Topics are the missing topics, each once, in the order of
	// Config.Topics; none when sarama's metadata, read back after the
	// failed refresh, lacks none of them (a topic created meanwhile).
	Topics     []string
	DeadLetter bool  // the missing topic is Config.DeadLetterTopic
	Err        error // sarama's error from refreshing the topics' metadata

	asked []string // the topics whose metadata was refreshed
}

func (e *UnknownTopicError) Error() string {
	topics := e.Topics
	if len(topics) == 0 {
		topics = e.asked
	}
	quoted := make([]string, len(topics))
	for i, t := range topics {
		quoted[i] = strconv.Quote(t)
	}
	list := strings.Join(quoted, ", ")
	switch {
	case e.DeadLetter:
		return fmt.Sprintf("group: dead-letter topic %s does not exist (group %q)", list, e.Group)
	case len(e.Topics) == 0:
		return fmt.Sprintf("group: one of topics %s does not exist (group %q)", list, e.Group)
	case len(e.Topics) == 1:
		return fmt.Sprintf("group: topic %s does not exist (group %q)", list, e.Group)
	}
	return fmt.Sprintf("group: topics %s do not exist (group %q)", list, e.Group)
}

func (e *UnknownTopicError) Unwrap() []error {
	if e.DeadLetter {
		return []error{ErrDeadLetterTopic, ErrUnknownTopic, e.Err}
	}
	return []error{ErrUnknownTopic, e.Err}
}

// ErrorCounts are Stats.Errors split by cause, as far as sarama's errors
// (their types and Kafka error codes) tell them apart.
type ErrorCounts struct {
	Network     int64 // brokers unreachable, connections lost, timeouts
	Coordinator int64 // NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS
	Rebalance   int64 // REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL
	Leader      int64 // NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, FENCED_LEADER_EPOCH
	Auth        int64 // SASL and ACL failures (these end Run)
	Topic       int64 // UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC (these end Run)
	OutOfRange  int64 // OFFSET_OUT_OF_RANGE
	Metadata    int64 // OFFSET_METADATA_TOO_LARGE and INVALID_COMMIT_OFFSET_SIZE
	Offsets     int64 // bad offsets in a claim, corrupt commit metadata, failed OffsetFetch
	Other       int64
}

// errClass is one field of ErrorCounts.
type errClass int

const (
	errNetwork errClass = iota
	errCoordinator
	errRebalance
	errLeader
	errAuth
	errTopic
	errOutOfRange
	errMetadata
	errOffsets
	errOther
	numErrClasses
)

// kafkaErrors maps the Kafka error codes Orderly tells apart to their
// cause, and for the causes Run cannot get past, the sentinel to end it
// with.
var kafkaErrors = []struct {
	kerr  sarama.KError
	class errClass
	fatal error
}{
	{sarama.ErrSASLAuthenticationFailed, errAuth, ErrAuth},
	{sarama.ErrUnsupportedSASLMechanism, errAuth, ErrAuth},
	{sarama.ErrIllegalSASLState, errAuth, ErrAuth},
	{sarama.ErrTopicAuthorizationFailed, errAuth, ErrNotAuthorized},
	{sarama.ErrGroupAuthorizationFailed, errAuth, ErrNotAuthorized},
	{sarama.ErrClusterAuthorizationFailed, errAuth, ErrNotAuthorized},
	{sarama.ErrInvalidSessionTimeout, errOther, ErrSessionTimeout},
	{sarama.ErrUnknownTopicOrPartition, errTopic, ErrUnknownTopic},
	{sarama.ErrInvalidTopic, errTopic, ErrUnknownTopic},
	{sarama.ErrNotCoordinatorForConsumer, errCoordinator, nil},
	{sarama.ErrConsumerCoordinatorNotAvailable, errCoordinator, nil},
	{sarama.ErrOffsetsLoadInProgress, errCoordinator, nil},
	{sarama.ErrRebalanceInProgress, errRebalance, nil},
	{sarama.ErrIllegalGeneration, errRebalance, nil},
	{sarama.ErrUnknownMemberId, errRebalance, nil},
	{sarama.ErrFencedInstancedId, errRebalance, nil},
	// The group's members use other assignment strategies: this member
	// joins once they leave (a group moving to Orderly), so Run retries.
	{sarama.ErrInconsistentGroupProtocol, errRebalance, nil},
	{sarama.ErrNotLeaderForPartition, errLeader, nil},
	{sarama.ErrLeaderNotAvailable, errLeader, nil},
	{sarama.ErrFencedLeaderEpoch, errLeader, nil},
	{sarama.ErrOffsetOutOfRange, errOutOfRange, nil},
	{sarama.ErrOffsetMetadataTooLarge, errMetadata, nil},
	{sarama.ErrInvalidCommitOffsetSize, errMetadata, nil},
	{sarama.ErrRequestTimedOut, errNetwork, nil},
	{sarama.ErrNetworkException, errNetwork, nil},
}

// classify names the cause of a sarama error, and for the causes Run
// cannot get past, the sentinel to end it with. Kafka error codes are
// looked for with errors.Is, since sarama wraps them (with the broker's
// message, or inside ErrOutOfBrokers).
func classify(err error) (errClass, error) {
	for _, k := range kafkaErrors {
		if errors.Is(err, k.kerr) {
			return k.class, k.fatal
		}
	}
	var netErr net.Error
	switch {
	case errors.Is(err, sarama.ErrOutOfBrokers), errors.Is(err, sarama.ErrNotConnected),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &netErr):
		return errNetwork, nil
	}
	return errOther, nil
}

// errorCounters count errors by errClass.
type errorCounters [numErrClasses]atomic.Int64

func (e *errorCounters) add(c errClass) { e[c].Add(1) }

func (e *errorCounters) snapshot() (ErrorCounts, int64) {
	c := ErrorCounts{
		Network: e[errNetwork].Load(), Coordinator: e[errCoordinator].Load(), Rebalance: e[errRebalance].Load(),
		Leader: e[errLeader].Load(), Auth: e[errAuth].Load(), Topic: e[errTopic].Load(),
		OutOfRange: e[errOutOfRange].Load(), Metadata: e[errMetadata].Load(), Offsets: e[errOffsets].Load(),
		Other: e[errOther].Load(),
	}
	var total int64
	for i := range e {
		total += e[i].Load()
	}
	return c, total
}
