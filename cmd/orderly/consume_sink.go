package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/lograte"
)

// sink is where consume forwards batches: an HTTP endpoint or a command.
// send is the group's Do: nil when the whole batch is done, a
// *group.BatchError naming what became of some items, or another error
// (the call as a whole failed: the group calls again on halves of a batch
// of several, and charges a record that failed alone an attempt).
type sink interface {
	send(ctx context.Context, batch []*group.Message) error
	describe() string
	close()
}

// sinkCounters count what the endpoint or command answered, call by call
// (a call is one request or one command run).
type sinkCounters struct {
	calls     atomic.Int64 // requests sent or commands run
	ok        atomic.Int64 // calls that succeeded (2xx, exit 0)
	throttled atomic.Int64 // 429 and 503: the endpoint paused
	failed    atomic.Int64 // 5xx, timeouts, refused connections; exit 75: retried with backoff
	endpoint  atomic.Int64 // 3xx, 401, 403, 404, 407; exit 126, 127: retried, never dead-lettered
	rejected  atomic.Int64 // calls answered other 4xx, or other exits (see rejectedCall), halves of a batch included
	itemRetry atomic.Int64 // records a successful call's outcomes named retry or defer
	itemRej   atomic.Int64 // records a successful call's outcomes named reject

	mu           sync.Mutex
	lastEndpoint string // the last endpoint error, for the progress line
}

func (c *sinkCounters) endpointError(what string) {
	c.endpoint.Add(1)
	c.mu.Lock()
	c.lastEndpoint = what
	c.mu.Unlock()
}

func (c *sinkCounters) lastEndpointError() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastEndpoint
}

// where names a batch's first record for error messages.
func where(batch []*group.Message) string {
	m := batch[0]
	s := fmt.Sprintf("%s/%d@%d", m.Topic, m.Partition, m.Offset)
	if len(batch) > 1 {
		s += fmt.Sprintf(" and %d more", len(batch)-1)
	}
	return s
}

// callCause is why a call's ctx ended: a revoke or shutdown, or the
// call's deadline, which consume's user knows as --timeout (the group's
// ErrTimeout names its MsgTimeout); timeout is that flag as flagArg names
// it, with its variable when the value came from there.
func callCause(ctx context.Context, timeout string) error {
	cause := context.Cause(ctx)
	if errors.Is(cause, group.ErrTimeout) {
		return fmt.Errorf("ran past %s: %w", timeout, cause)
	}
	return cause
}

// itemErr names one record in its error.
func itemErr(m *group.Message, err error) error {
	return fmt.Errorf("%s/%d@%d: %w", m.Topic, m.Partition, m.Offset, err)
}

// failAll fails every item of the batch (charged an attempt, retried
// after backoff) with err.
func failAll(batch []*group.Message, err error) error {
	var be group.BatchError
	for i, m := range batch {
		be.Fail(i, itemErr(m, err))
	}
	return &be
}

// deferAll runs every item again after d, uncharged.
func deferAll(n int, d time.Duration) error {
	var be group.BatchError
	for i := range n {
		be.Defer(i, d)
	}
	return &be
}

// endpointBackoff is the delay after consecutive endpoint errors: the
// retry backoff doubling per error, capped; a success resets it.
type endpointBackoff struct {
	first, max time.Duration
	mu         sync.Mutex
	next       time.Duration
}

func (b *endpointBackoff) failed() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	d := max(b.next, b.first, time.Millisecond)
	b.next = min(2*d, max(b.max, b.first))
	return d
}

func (b *endpointBackoff) ok() {
	b.mu.Lock()
	b.next = 0
	b.mu.Unlock()
}

// batchFields are the log fields of a batch's first record.
func batchFields(batch []*group.Message) []zap.Field {
	m := batch[0]
	return []zap.Field{zap.String("topic", m.Topic), zap.Int32("partition", m.Partition),
		zap.Int64("offset", m.Offset), zap.Int("attempt", m.Attempt), zap.Int("batch", len(batch))}
}

// warnEvery is how often consume's sinks log a warning of one kind.
const warnEvery = 10 * time.Second

// sinkCore is what both sinks share: the gate every call passes, the
// counters, the endpoint backoff, the delays and the rate-limited log.
type sinkCore struct {
	gate     *gate
	ctr      *sinkCounters
	endpoint endpointBackoff
	defDelay time.Duration // a deferral's delay when none is named (--backoff)
	timeout  string        // --timeout and its value, as flagArg names them
	log      *zap.Logger
	// One line per 10s of each kind, with the count held back: endpoint
	// errors, and failed calls (warnf).
	endpointLog, failLog lograte.Limit
}

func newSinkCore(o *consumeOpts, gt *gate, ctr *sinkCounters, log *zap.Logger) sinkCore {
	return sinkCore{gate: gt, ctr: ctr, defDelay: o.backoff, timeout: flagArg(o.fs, "timeout", o.timeout), log: log,
		endpointLog: lograte.Limit{Every: warnEvery}, failLog: lograte.Limit{Every: warnEvery}, endpoint: endpointBackoff{first: o.backoff, max: o.maxBackoff}}
}

// endpointFault handles an answer that is no record's fault (a wrong URL,
// command or credentials, an endpoint not trusted): it counts what, pauses
// every call for the endpoint backoff (calls in flight when the first came
// do not double it), logs msg with fields at most every 10s, and defers
// batch uncharged: retried, never dead-lettered.
func (c *sinkCore) endpointFault(batch []*group.Message, what, msg string, fields ...zap.Field) error {
	c.ctr.endpointError(what)
	d := c.gate.closeIfOpen(c.endpoint.failed)
	c.endpointLog.Error(c.log, msg, append(append(batchFields(batch), fields...), zap.Duration("pause", d))...)
	return deferAll(len(batch), d)
}

// rejectedCall handles an answer that rejects the call (other 4xx, an
// exit other than 0, 75, 126 and 127) with err, which names the answer. A
// call of one record dead-letters it (reason rejected). A call of more
// does not say which of its records are bad, so it fails wrapping
// group.ErrRejected: the group then calls Do again at once on halves of
// the batch, halving whatever is rejected again, until the rejected
// records stand alone, and dead-letters those; their batch mates are done
// by the calls that succeed, and no attempt is charged. It halves so
// during an outage too, and a rejection is no failure of the endpoint: a
// rejected record in the outage's probe does not keep the outage on.
func (c *sinkCore) rejectedCall(batch []*group.Message, err error) error {
	c.ctr.rejected.Add(1)
	if len(batch) > 1 {
		return fmt.Errorf("%s rejected as a batch, split to find the rejected records: %w: %w", where(batch), group.ErrRejected, err)
	}
	var be group.BatchError
	be.DeadLetter(0, itemErr(batch[0], err))
	return &be
}
