package group

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"go.uber.org/zap"

	"github.com/orderly-go/orderly/dispatch"
	"github.com/orderly-go/orderly/localqueue"
	"github.com/orderly-go/orderly/merge"
)

// The failure path. A message whose lane is held (it failed, was deferred,
// or is to be dead-lettered: dispatch.Settle) comes here, to hold. What
// waits out a backoff or a deferral is timed by an NSQ-style channel, a
// memory-only localqueue.Queue whose deferred heap and shared Scanner
// redeliver it when due: its body is a token, and waiting maps the token to
// the held item (the item stays in memory, first in its lane, and holds the
// commit frontier; its attempt count and due time travel in the commit
// metadata). localqueue knows nothing of Kafka: this file is where a queue
// body is tied to a topic, partition, offset and lane. Unordered messages
// due later than ParkAfter are parked on disk instead (parked.go), and dead
// letters are written by deadLetters (deadletters.go).

// Reasons a message is dead-lettered (the __orderly.errors.reason header).
const (
	reasonMaxAttempts = "max_attempts"
	reasonRejected    = "rejected"
	reasonTimeout     = "timeout"
	reasonPoison      = "poison"
)

// failures is the group's failure path.
type failures[T any] struct {
	g           *Group[T]
	scanner     *localqueue.Scanner
	timers      *localqueue.Queue // tokens of held items waiting out a delay
	parkScanner *localqueue.Scanner

	mu      sync.Mutex
	waiting map[uint64]waitEntry[T] // token -> the item it times
	byItem  map[*dispatch.Item[Message, T]]uint64
	next    uint64

	retrying atomic.Int64 // items waiting out a retry's backoff
	retried  atomic.Int64 // Stats.Retries: retries decided here (a lane's held first item), and by ShowAttempt (the rest)
	deferred atomic.Int64 // items waiting out a deferral

	outage outage
	dead   *deadLetters[T]
	park   *parking[T] // nil unless Unordered with a DataPath
	// parkView is park for Stats, which may run while Run opens it.
	parkView atomic.Pointer[parking[T]]

	stop context.CancelFunc
	wg   sync.WaitGroup
}

// waitEntry is a held item waiting for its token.
type waitEntry[T any] struct {
	it       *dispatch.Item[Message, T]
	due      time.Time
	deferred bool
}

// scanInterval is how often the failure queues' scanner looks for due
// messages: a tenth of the first retry's backoff, between 1 ms and nsqd's
// 100 ms, so that backoffs are kept to within about a tenth.
func scanInterval(backoff time.Duration) time.Duration {
	return min(max(backoff/10, time.Millisecond), 100*time.Millisecond)
}

func newFailures[T any](g *Group[T]) *failures[T] {
	f := &failures[T]{
		g:       g,
		waiting: make(map[uint64]waitEntry[T]),
		byItem:  make(map[*dispatch.Item[Message, T]]uint64),
	}
	f.outage.init(g.cfg.Retry)
	f.dead = newDeadLetters(g)
	return f
}

// maxDelay is the longest a held item may wait for its retry or deferral.
const maxDelay = 30 * 24 * time.Hour

// open opens what the failure path keeps outside memory: the dead-letter
// destination (a producer on client, or the local store) and, for
// Unordered with a DataPath, the parked messages. Run calls it before
// start; without it dead letters are skipped and nothing is parked.
func (f *failures[T]) open(client sarama.Client) error {
	if err := f.dead.open(client); err != nil {
		return err
	}
	if f.g.cfg.Ordering != Unordered || f.g.cfg.DataPath == "" {
		return nil
	}
	sc, err := f.newScanner()
	if err != nil {
		return errors.Join(err, f.dead.close())
	}
	f.parkScanner = sc
	if f.park, err = newParking(f.g, sc); err != nil {
		sc.Close()
		return errors.Join(err, f.dead.close())
	}
	f.parkView.Store(f.park)
	return nil
}

func (f *failures[T]) newScanner() (*localqueue.Scanner, error) {
	sc, err := localqueue.NewScanner(localqueue.ScannerOptions{ScanInterval: scanInterval(f.g.cfg.Retry.Backoff)})
	if err != nil {
		return nil, fmt.Errorf("group: failure path: %w", err)
	}
	return sc, nil
}

// start opens the timers queue and runs the goroutines of the failure
// path until close.
func (f *failures[T]) start(ctx context.Context) error {
	sc, err := f.newScanner()
	if err != nil {
		return err
	}
	timers, err := localqueue.Open(localqueue.Options{
		Name:          "orderly-timers",
		MemQueueSize:  localqueue.DefaultMemQueueSize,
		MaxReqTimeout: maxDelay,
		MsgTimeout:    time.Hour, // a token is finished right after Get
		Scanner:       sc,
		Logger:        f.g.log,
	})
	if err != nil {
		sc.Close()
		return fmt.Errorf("group: failure path: %w", err)
	}
	f.scanner, f.timers = sc, timers
	ctx, f.stop = context.WithCancel(ctx)
	f.wg.Go(func() { f.runTimers(ctx) })
	f.dead.start(ctx, &f.wg)
	if f.park != nil {
		f.park.start(ctx, &f.wg)
	}
	return nil
}

// stopRedelivery stops handing parked messages out and drains those
// running (see parking.drain).
func (f *failures[T]) stopRedelivery() {
	if f.park != nil {
		f.park.stopRedelivery()
	}
}

// close stops the failure path and releases its queues. Items still held
// stay unfinished: nothing is committed past them.
func (f *failures[T]) close() error {
	f.outage.stop()
	if f.stop != nil {
		f.stop()
	}
	f.wg.Wait()
	var err error
	if f.timers != nil {
		// Delete, not Close: its tokens time retries of claims that have
		// all ended (their commits list those messages), so what is left
		// is of nothing, not messages discarded.
		err = f.timers.Delete()
		f.scanner.Close()
	}
	if f.park != nil {
		err = errors.Join(err, f.park.close())
		f.parkScanner.Close()
	}
	return errors.Join(err, f.dead.close())
}

// errAttemptsUsedUp is the error of the dead letter of a message whose
// last allowed attempt failed under a previous owner of its partition.
var errAttemptsUsedUp = errors.New("group: its last allowed attempt failed under a previous owner of the partition")

// errAttemptsUsedUpBehind is the error of the dead letter of a message
// whose last allowed attempt failed behind an earlier message of its key
// when that failure's own error was not kept.
var errAttemptsUsedUpBehind = errors.New("group: its last allowed attempt failed in a call behind an earlier failed message of its key")

// kindResumed is the Outcome.Kind of a message a previous owner of its
// partition left waiting for a retry (the commit metadata said so): it
// waits out the rest of its backoff, at the attempt it had reached.
const kindResumed merge.Kind = 100

// hold is dispatch's Options.Hold: a lane is held for it, which failed,
// was deferred, is to be dead-lettered, or was left waiting by the
// partition's previous owner.
func (f *failures[T]) hold(it *dispatch.Item[Message, T], o dispatch.Outcome) {
	switch o.Kind {
	case merge.Deferred:
		f.wait(it, o.Delay, true)
	case kindResumed:
		if f.g.cfg.Retry.exhausted(it.Attempt) {
			// Its last allowed attempt failed under the previous owner,
			// whose dead letter did not make it into a commit: it is
			// dead-lettered (again), not run past MaxAttempts.
			it.NoteFailure(time.Now())
			f.deadLetterUsedUp(it, errAttemptsUsedUp)
			return
		}
		f.wait(it, o.Delay, false)
	case merge.DeadLettered:
		f.dead.add(it, nil, reasonRejected, it.Attempt, o.Err)
	case merge.Exhausted:
		// Charged its last allowed attempt in a call that also failed
		// an earlier message of its key: dead-lettered in its turn,
		// without running again.
		err := o.Err
		if err == nil {
			err = errAttemptsUsedUpBehind
		}
		f.deadLetterUsedUp(it, err)
	default: // merge.Failed: charged an attempt (and its first failure noted) already
		if f.outage.failed(it.Lane) {
			// The dependency behind Do looks down: the failure does not
			// count against the item (see outage).
			f.g.sched.Uncharge(it) // the commit metadata may be reading it
			f.wait(it, f.outage.probeDelay(), true)
			return
		}
		if f.g.cfg.Retry.exhausted(it.Attempt) {
			f.deadLetterUsedUp(it, o.Err)
			return
		}
		// Counted here, where the retry is decided, also in a drain (the
		// next owner hands it out, resumed from the final commit): a
		// parked message comes back showing its attempt, and one handed
		// over to another member is resumed showing it. Showing the
		// attempt now keeps ShowAttempt from counting it again.
		if it.Msg.Attempt < it.Attempt {
			f.retried.Add(1)
			it.Msg.Attempt = it.Attempt
		}
		f.wait(it, f.backoff(it.Attempt), false)
	}
}

// deadLetterUsedUp dead-letters it, whose last allowed attempt failed with
// err: reason timeout when that attempt ran past MsgTimeout, else
// max_attempts.
func (f *failures[T]) deadLetterUsedUp(it *dispatch.Item[Message, T], err error) {
	reason := reasonMaxAttempts
	if errors.Is(err, ErrTimeout) {
		reason = reasonTimeout
	}
	f.dead.add(it, nil, reason, it.Attempt-1, err)
}

// backoff is the wait before the given attempt (2 for the first retry):
// Retry.Backoff doubled per retry, capped at MaxBackoff, spread by Jitter.
func (f *failures[T]) backoff(attempt int) time.Duration {
	r := f.g.cfg.Retry
	d := r.Backoff << min(max(attempt-2, 0), 30)
	if d > r.MaxBackoff || d <= 0 {
		d = r.MaxBackoff
	}
	if r.Jitter > 0 {
		d += time.Duration((rand.Float64()*2 - 1) * r.Jitter * float64(d))
	}
	return max(d, 0)
}

// wait holds it for d: parked on disk when Unordered with a DataPath and d
// is past ParkAfter, otherwise timed by a token in the timers queue.
func (f *failures[T]) wait(it *dispatch.Item[Message, T], d time.Duration, deferred bool) {
	d = min(d, maxDelay)
	if f.park != nil && d > f.g.cfg.ParkAfter {
		f.park.add(it, d, deferred)
		return
	}
	f.waitInMemory(it, d, deferred)
}

// waitInMemory holds it for d, timed by a token in the timers queue.
func (f *failures[T]) waitInMemory(it *dispatch.Item[Message, T], d time.Duration, deferred bool) {
	if d <= 0 {
		f.g.sched.Unhold(it, false)
		return
	}
	if !f.g.sched.Waits(it) {
		return // its partition is gone: let go (a failure in its drain)
	}
	f.mu.Lock()
	if it.Revoked() {
		// Its partition is gone, and forget has run or will not see
		// it: nothing would take this entry back (the parker calls in
		// late for a job queued before the revoke).
		f.mu.Unlock()
		return
	}
	f.next++
	token := f.next
	f.waiting[token] = waitEntry[T]{it: it, due: time.Now().Add(d), deferred: deferred}
	f.byItem[it] = token
	f.mu.Unlock()
	if deferred {
		f.deferred.Add(1)
	} else {
		f.retrying.Add(1)
	}
	var body [8]byte
	binary.BigEndian.PutUint64(body[:], token)
	if _, err := f.timers.PutDeferred(body[:], d); err != nil {
		// A memory-only queue refuses only a closed queue or a bad
		// delay: let the lane go on at once rather than hold it forever.
		f.g.log.Error("timing a retry failed; retrying at once", zap.String("topic", it.Msg.Topic),
			zap.Int32("partition", it.Msg.Partition), zap.Int64("offset", it.Msg.Offset), zap.Error(err))
		f.release(token)
	}
}

// runTimers lets the held lanes go on as their tokens come due.
func (f *failures[T]) runTimers(ctx context.Context) {
	for {
		m, err := f.timers.Get(ctx)
		if err != nil {
			return // ctx ended or the queue closed
		}
		if len(m.Body) == 8 {
			f.release(binary.BigEndian.Uint64(m.Body))
		}
		_ = f.timers.Finish(m.ID)
	}
}

// release ends the wait of a token's item and lets its lane go on.
func (f *failures[T]) release(token uint64) {
	f.mu.Lock()
	e, ok := f.waiting[token]
	if ok {
		delete(f.waiting, token)
		delete(f.byItem, e.it)
	}
	f.mu.Unlock()
	if !ok {
		return
	}
	if e.deferred {
		f.deferred.Add(-1)
	} else {
		f.retrying.Add(-1)
	}
	f.g.sched.Unhold(e.it, false)
}

// forget drops the waits of p's items: p was revoked, its items dropped.
func (f *failures[T]) forget(p *dispatch.Partition[Message, T]) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for token, e := range f.waiting {
		if e.it.Revoked() && e.it.Part() == p {
			delete(f.waiting, token)
			delete(f.byItem, e.it)
			if e.deferred {
				f.deferred.Add(-1)
			} else {
				f.retrying.Add(-1)
			}
		}
	}
}

// dueOf is when a held item's wait ends, if it is waiting for a token.
func (f *failures[T]) dueOf(it *dispatch.Item[Message, T]) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	token, ok := f.byItem[it]
	if !ok {
		return time.Time{}, false
	}
	return f.waiting[token].due, true
}
