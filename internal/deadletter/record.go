package deadletter

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Header is one Kafka record header. A nil Value is a null header value,
// distinct from an empty one.
type Header struct{ Key, Value []byte }

// Record is one dead letter, the same on a dead-letter topic and in a
// Store.
type Record struct {
	// Key and Value are the original record's. nil is Kafka's null (a
	// null key, a tombstone value) and stays nil; an empty slice stays
	// empty (see the package doc).
	Key, Value []byte
	// Headers are the original headers (minus earlier __orderly.errors.*
	// ones) followed by the __orderly.errors.* ones: see Headers.
	Headers []Header
	// Timestamp is the original record's timestamp.
	Timestamp time.Time
}

// Size is the record's payload in bytes: key, value and headers.
func (r Record) Size() int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// Info is what the __orderly.errors.* headers say.
type Info struct {
	Topic        string    // __orderly.errors.topic: the origin topic
	Partition    int32     // __orderly.errors.partition
	Offset       int64     // __orderly.errors.offset
	Timestamp    time.Time // __orderly.errors.timestamp: when it was dead-lettered
	Group        string    // __orderly.errors.group: the consumer group
	Attempts     int       // __orderly.errors.attempts
	Reason       string    // __orderly.errors.reason: max_attempts, rejected, timeout, poison
	Message      string    // __orderly.errors.message: the error text, at most MaxMessage bytes
	FirstFailure time.Time // __orderly.errors.first.failure.timestamp
}

// Reasons a message is dead-lettered (__orderly.errors.reason).
const (
	ReasonMaxAttempts = "max_attempts" // it failed Retry.MaxAttempts times
	ReasonRejected    = "rejected"     // Do asked for it to be dead-lettered now
	ReasonTimeout     = "timeout"      // its last attempt ran past MsgTimeout
	ReasonPoison      = "poison"       // the decoder (Handler.New) failed on it
)

// Reasons lists the reasons above, in that order.
var Reasons = []string{ReasonMaxAttempts, ReasonRejected, ReasonTimeout, ReasonPoison}

// HeaderPrefix starts the name of every header Orderly adds.
const HeaderPrefix = "__orderly.errors."

// The header names, in the order Headers appends them.
const (
	HeaderTopic        = HeaderPrefix + "topic"
	HeaderPartition    = HeaderPrefix + "partition"
	HeaderOffset       = HeaderPrefix + "offset"
	HeaderTimestamp    = HeaderPrefix + "timestamp"
	HeaderGroup        = HeaderPrefix + "group"
	HeaderAttempts     = HeaderPrefix + "attempts"
	HeaderReason       = HeaderPrefix + "reason"
	HeaderMessage      = HeaderPrefix + "message"
	HeaderFirstFailure = HeaderPrefix + "first.failure.timestamp"
)

var headerNames = []string{HeaderTopic, HeaderPartition, HeaderOffset, HeaderTimestamp,
	HeaderGroup, HeaderAttempts, HeaderReason, HeaderMessage, HeaderFirstFailure}

// TimeFormat is the layout of the timestamp headers: RFC 3339 in UTC with
// milliseconds, e.g. 2026-01-02T15:04:05.123Z (Kafka's precision).
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// MaxMessage is the most bytes of error text __orderly.errors.message
// holds; a longer text is cut at a UTF-8 boundary and ends with "…".
const MaxMessage = 1024

// IsOrderly reports whether a header name is one Orderly adds.
func IsOrderly(key []byte) bool { return bytes.HasPrefix(key, []byte(HeaderPrefix)) }

// Original returns h without the __orderly.errors.* headers, in order. It
// allocates a new slice; the headers' bytes are shared with h.
func Original(h []Header) []Header {
	out := make([]Header, 0, len(h))
	for _, x := range h {
		if !IsOrderly(x.Key) {
			out = append(out, x)
		}
	}
	return out
}

// Headers returns the headers of the dead letter of a record with headers
// orig: orig minus every __orderly.errors.* header it carries (a record
// that was dead-lettered, replayed and dead-lettered again does not pile
// them up; the new ones say what happened last), then the
// __orderly.errors.* headers of info, all as text (see the package doc).
// info.Message is cut to MaxMessage bytes.
func Headers(orig []Header, info Info) []Header {
	out := make([]Header, 0, len(orig)+len(headerNames))
	out = append(out, Original(orig)...)
	add := func(k, v string) { out = append(out, Header{Key: []byte(k), Value: []byte(v)}) }
	add(HeaderTopic, info.Topic)
	add(HeaderPartition, strconv.FormatInt(int64(info.Partition), 10))
	add(HeaderOffset, strconv.FormatInt(info.Offset, 10))
	add(HeaderTimestamp, FormatTime(info.Timestamp))
	add(HeaderGroup, info.Group)
	add(HeaderAttempts, strconv.Itoa(info.Attempts))
	add(HeaderReason, info.Reason)
	add(HeaderMessage, CutMessage(info.Message))
	add(HeaderFirstFailure, FormatTime(info.FirstFailure))
	return out
}

// FormatTime formats t as the timestamp headers do (TimeFormat, UTC).
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

// CutMessage is Cut(s, MaxMessage): what a dead letter keeps of an error.
func CutMessage(s string) string { return Cut(s, MaxMessage) }

const ellipsis = "…"

// Cut returns s if it fits n bytes, else its longest prefix that ends at a
// UTF-8 boundary and leaves room for "…" (3 bytes), followed by "…". n is
// at least 3.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n -= len(ellipsis)
	// Back up to the start of a rune: never split a multi-byte sequence.
	// Bytes that are not valid UTF-8 count as runes of their own.
	for i := 0; i < utf8.UTFMax-1 && n > 0 && !utf8.RuneStart(s[n]); i++ {
		n--
	}
	return s[:n] + ellipsis
}

// CutFront is Cut from the other end: s if it fits n bytes, else "…"
// followed by its longest suffix that starts at a UTF-8 boundary and fits
// in n bytes with it. n is at least 3.
func CutFront(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := len(s) - (n - len(ellipsis))
	for i := 0; i < utf8.UTFMax-1 && cut < len(s) && !utf8.RuneStart(s[cut]); i++ {
		cut++
	}
	return ellipsis + s[cut:]
}

// ErrNotDeadLetter is wrapped by ParseInfo's error when headers are
// missing: the record was not dead-lettered by Orderly.
var ErrNotDeadLetter = errors.New("not an Orderly dead letter")

// HeaderError is ParseInfo's error for a header whose value does not
// parse.
type HeaderError struct {
	Key   string
	Value []byte
	Err   error
}

func (e *HeaderError) Error() string {
	return fmt.Sprintf("deadletter: header %s = %q: %v", e.Key, e.Value, e.Err)
}

func (e *HeaderError) Unwrap() error { return e.Err }

// ParseInfo reads the __orderly.errors.* headers of h. Every header
// Headers writes must be there (none, or a missing one, is an error
// wrapping ErrNotDeadLetter that says which); when a name appears more than
// once, the last one counts. An unknown reason is returned as it is (a
// later version may add reasons).
func ParseInfo(h []Header) (Info, error) {
	vals := make(map[string][]byte, len(headerNames))
	for _, x := range h {
		if IsOrderly(x.Key) {
			vals[string(x.Key)] = x.Value
		}
	}
	if len(vals) == 0 {
		return Info{}, fmt.Errorf("deadletter: no %s* headers: %w", HeaderPrefix, ErrNotDeadLetter)
	}
	var missing []string
	for _, k := range headerNames {
		if _, ok := vals[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return Info{}, fmt.Errorf("deadletter: missing header %s: %w", strings.Join(missing, ", "), ErrNotDeadLetter)
	}
	var (
		info Info
		errs []error
	)
	integer := func(k string, bits int) int64 {
		n, err := strconv.ParseInt(string(vals[k]), 10, bits)
		if err != nil {
			errs = append(errs, &HeaderError{Key: k, Value: vals[k], Err: errors.New("not a decimal integer")})
		}
		return n
	}
	timestamp := func(k string) time.Time {
		t, err := time.Parse(time.RFC3339Nano, string(vals[k]))
		if err != nil {
			errs = append(errs, &HeaderError{Key: k, Value: vals[k], Err: errors.New("not an RFC 3339 time")})
		}
		return t.UTC()
	}
	info.Topic = string(vals[HeaderTopic])
	info.Partition = int32(integer(HeaderPartition, 32))
	info.Offset = integer(HeaderOffset, 64)
	info.Timestamp = timestamp(HeaderTimestamp)
	info.Group = string(vals[HeaderGroup])
	info.Attempts = int(integer(HeaderAttempts, 64))
	info.Reason = string(vals[HeaderReason])
	info.Message = string(vals[HeaderMessage])
	info.FirstFailure = timestamp(HeaderFirstFailure)
	if len(errs) > 0 {
		return Info{}, errors.Join(errs...)
	}
	return info, nil
}
