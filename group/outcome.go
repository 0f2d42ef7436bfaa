package group

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/orderly-go/orderly/merge"
)

// BatchError is what Do returns to say what became of some items of its
// batch, item by item; the items it does not name are done:
//   - Fail: the item failed; it is charged an attempt and retried after
//     Config.Retry's backoff (or dead-lettered after Retry.MaxAttempts);
//   - Defer: run the item again after a delay, without charging an attempt
//     (the item is not ready yet: a dependency it waits for, a rate limit);
//   - DeadLetter: the item can never succeed: dead-letter it now (reason
//     rejected), whatever its attempts.
//
// A named item's later messages in its lane wait behind it, in the batch
// and after it, and are handed out again after it without being charged:
// lane order holds. Other lanes are not held back.
//
//	var failed group.BatchError
//	for i, v := range batch {
//		if err := store(ctx, v); err != nil {
//			failed.Fail(i, err)
//		}
//	}
//	return failed.Err() // nil when nothing failed
//
// The zero value is ready to use. Do may wrap it for context (fmt.Errorf
// with one %w). Any other error fails the whole batch, which is then
// retried in halves to find the failing items (see Handler.Do); so does a
// BatchError beside other errors (errors.Join, several %w: something else
// failed too), and one that names no item of the batch (indexes outside
// it are ignored). An empty BatchError, as the error or wrapped alone,
// means nothing failed; Err returns nil for it. See AsBatchError.
type BatchError struct {
	items []itemError
}

type itemError struct {
	index int
	kind  merge.Kind
	delay time.Duration
	err   error
}

// Fail marks item i of the batch (its index in the slice Do received) as
// failed with err.
func (e *BatchError) Fail(i int, err error) {
	e.items = append(e.items, itemError{index: i, kind: merge.Failed, err: err})
}

// Defer asks for item i to be handed out again after d, not counted as
// an attempt; its lane waits meanwhile.
func (e *BatchError) Defer(i int, d time.Duration) {
	e.items = append(e.items, itemError{index: i, kind: merge.Deferred, delay: max(d, 0), err: errDeferred})
}

// DeadLetter asks for item i to be dead-lettered now, because of reason
// (its text goes into the __orderly.errors.message header). The source
// offset is committed past it only once its dead letter is written.
func (e *BatchError) DeadLetter(i int, reason error) {
	e.items = append(e.items, itemError{index: i, kind: merge.DeadLettered, err: reason})
}

// errDeferred is the error of a deferred item in a BatchError's message.
var errDeferred = errors.New("deferred")

// Len is how many items were marked failed (0 for a nil BatchError).
func (e *BatchError) Len() int {
	if e == nil {
		return 0
	}
	return len(e.items)
}

// Indexes returns the indexes of the items marked, in the order they were
// marked (nil for a nil BatchError). Indexes outside the batch are listed
// too; Run ignores them (and fails the batch as a whole when none is
// inside it).
func (e *BatchError) Indexes() []int {
	if e == nil {
		return nil
	}
	idx := make([]int, len(e.items))
	for i, it := range e.items {
		idx[i] = it.index
	}
	return idx
}

// OnlyDeferred reports whether the items e names within a batch of n
// items (indexes 0 to n-1; of two verdicts on one item, the first) are
// all deferred, and there is one at least. Run counts a call that
// returned such a BatchError (alone, within MsgTimeout, its ctx not
// cancelled by a revoke or shutdown) in Stats.DeferredCalls, not
// Failures: no failure, only items asked for later.
func (e *BatchError) OnlyDeferred(n int) bool {
	if e == nil {
		return false
	}
	vs, _ := e.verdicts(nil, n)
	return merge.OnlyDeferred(vs)
}

// Err returns e, or nil when no item was marked failed.
func (e *BatchError) Err() error {
	if e == nil || len(e.items) == 0 {
		return nil
	}
	return e
}

// Error lists the failed items and their errors (the first few).
func (e *BatchError) Error() string {
	if e == nil {
		return "group: a nil *BatchError" // Do returned a typed nil: the batch failed as a whole
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d items failed", len(e.items))
	for i, it := range e.items {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(e.items)-3)
			break
		}
		fmt.Fprintf(&b, "; item %d: %v", it.index, it.err)
	}
	return b.String()
}

// Unwrap returns the items' errors, for errors.Is and errors.As.
func (e *BatchError) Unwrap() []error {
	if e == nil {
		return nil
	}
	errs := make([]error, 0, len(e.items))
	for _, it := range e.items {
		errs = append(errs, it.err)
	}
	return errs
}

// verdicts appends to dst the verdicts on the valid indexes for a batch of
// n items, in increasing order of index, one per index (the first given
// wins); it reports false when none is valid.
func (e *BatchError) verdicts(dst []merge.Verdict, n int) ([]merge.Verdict, bool) {
	dst = dst[:0]
	for _, it := range e.items {
		if it.index >= 0 && it.index < n {
			dst = append(dst, merge.Verdict{Index: it.index, Kind: it.kind, Delay: it.delay, Err: it.err})
		}
	}
	slices.SortStableFunc(dst, func(a, b merge.Verdict) int { return a.Index - b.Index })
	dst = slices.CompactFunc(dst, func(a, b merge.Verdict) bool { return a.Index == b.Index })
	return dst, len(dst) > 0
}

// AsBatchError is how Run reads Do's error: the BatchError in it, if any,
// and whether it says what became of the batch (sole): err is the
// BatchError, or wraps it alone for context (fmt.Errorf with one %w, as
// often as it likes). A BatchError beside other errors (errors.Join,
// several %w) is not sole: something else failed too, and the batch failed
// as a whole, whatever the BatchError names. (The otel package reads a
// call's error the same way.)
func AsBatchError(err error) (be *BatchError, sole bool) {
	for {
		switch e := err.(type) {
		case nil:
			return nil, false
		case *BatchError:
			return e, e != nil
		case interface{ Unwrap() error }:
			err = e.Unwrap()
			continue
		case interface{ Unwrap() []error }:
			// errors.Join drops nils: a join of one error (a cleanup's
			// nil error beside it, say) wraps it alone.
			if ws := slices.DeleteFunc(slices.Clone(e.Unwrap()), func(w error) bool { return w == nil }); len(ws) == 1 {
				err = ws[0]
				continue
			}
		}
		// Beside other errors, or behind an As method of the error's own.
		if errors.As(err, &be) && be != nil {
			return be, false
		}
		return nil, false
	}
}

// batchKey is the context key of the current batch's messages.
type batchKey struct{}

// batchInfo is one worker's view of its current Do call: messages builds
// the call's messages (nil outside a call).
type batchInfo struct {
	messages func() []*Message
}

// Messages returns the messages of the batch being handled by the Do call
// that received ctx, in the order of Do's batch: Messages(ctx)[i] is the
// message batch[i] was decoded from, with its Topic, Partition, Offset and
// Attempt. It is how a Do whose T is not *Message learns them. Call it in
// that Do call, on its goroutine: the slice and the messages are valid
// only until the call returns. Do's ctx is its worker's, kept across the
// worker's calls (a call allocates none), so Messages on it from another
// goroutine, or after the call returned, gives whatever that worker runs
// then, or nil between calls: a data race, not the call's messages.
func Messages(ctx context.Context) []*Message {
	if bi, ok := ctx.Value(batchKey{}).(*batchInfo); ok {
		return bi.messages()
	}
	return nil
}
