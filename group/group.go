// Package group consumes Kafka with ordered parallelism: many goroutines per
// partition, strict offset order within each lane (by default each key),
// and offsets committed only behind finished work.
//
//	g, err := group.New(group.Config{
//		Brokers: []string{"localhost:9092"},
//		Topics:  []string{"transfers"},
//		GroupID: "ledger",
//	}, group.Handler[*group.Message]{
//		Do: func(ctx context.Context, batch []*group.Message) error {
//			return store(ctx, batch) // nil: the whole batch is done
//		},
//	})
//	if err != nil { ... }
//	err = g.Run(ctx) // until ctx ends; drains, commits, returns
package group

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/orderly-go/orderly/dispatch"
	"github.com/orderly-go/orderly/internal/histogram"
	"github.com/orderly-go/orderly/internal/lograte"
	"github.com/orderly-go/orderly/merge"
)

// Handler is what a service plugs in.
type Handler[T any] struct {
	// New decodes a message into the value Do receives. nil: T must be
	// *Message and the message itself is passed. A New error is logged with
	// the message's topic/partition/offset, counted in Stats.DecodeErrors,
	// and the message is skipped past (it counts as finished for commits).
	New func(m *Message) (T, error)
	// Split names the message's ordering lane: messages of one partition
	// with equal Split reach Do in offset order and never concurrently.
	// nil: a hash of Key, so that the messages of a partition whose Key is
	// null or empty all share one lane.
	Split func(m *Message, v T) uint64
	// Do handles a batch of at most Config.Size values. nil error: every
	// value is done. A BatchError names the items that failed; the others
	// are done (see AsBatchError for a wrapped one). Any other error, or a
	// panic, fails the whole batch: it is
	// called again at once on halves of it (each half keeping lane order),
	// and so on, until the failing items stand alone, so its batch mates
	// finish after about 2*log2(Size) calls. A failed item is retried
	// after Config.Retry's backoff while the later messages of its lane
	// wait; other lanes do not. An error wrapping ErrRejected (not a
	// BatchError naming items) is halved likewise, also during an
	// outage, and an item rejected alone is dead-lettered, not retried.
	// Messages(ctx) gives each value's message
	// (topic, partition, offset, Attempt).
	//
	// ctx is cancelled, with a context.Cause of ErrRevoked, when a
	// partition of the batch's items was revoked and DrainTimeout passed
	// (its new owner may be handling them), and with ErrShutdown when Run
	// gives up on in-flight work. The batch's other items then run again,
	// uncharged.
	Do func(ctx context.Context, batch []T) error
}

func (h Handler[T]) validate() error {
	if h.Do == nil {
		return fmt.Errorf("%w: Handler.Do is nil", ErrConfig)
	}
	if h.New == nil {
		var zero T
		if _, ok := any(zero).(*Message); !ok {
			return fmt.Errorf("%w: Handler.New is nil, so T must be *group.Message, not %T", ErrConfig, zero)
		}
	}
	return nil
}

// wakeDelay bounds how late a claim loop hears that its items finished
// (dispatch.Options.WakeDelay): commits and shares lag the work by at most
// this much, in exchange for one wake per partition per wakeDelay instead
// of one per batch.
const wakeDelay = 500 * time.Microsecond

// backlog is the ready backlog at which claim loops stop turning messages
// into items (dispatch.Options.Backlog): the largest of two full batches,
// one item per worker, and one intake burst (Chan).
func backlog(cfg Config) int { return max(2*cfg.Size, cfg.Num, cfg.Chan) }

// Group consumes Config.Topics as Config.GroupID with a Handler. Create it
// with New; Run it once.
type Group[T any] struct {
	cfg     Config
	h       Handler[T]
	log     *zap.Logger
	seed    maphash.Seed
	sched   *dispatch.Scheduler[Message, T]
	workers []workerState[T] // per-worker scratch for Do calls

	client      sarama.Client // set by Run; nil in pipeline benchmarks
	started     atomic.Bool
	pool        *merge.Stats
	workerPool  atomic.Pointer[merge.Pool[Message, T]] // set once the workers run
	paused      atomic.Bool
	limitMu     sync.Mutex // orders Pause, Resume and the outage's limit
	outageLimit int        // -1: none
	fail        *failures[T]
	ctr         counters
	errs        errorCounters
	failLog     lograte.Limit                // "Do failed" warnings
	decodeLog   lograte.Limit                // undecodable messages skipped
	errLog      [numErrClasses]lograte.Limit // consumer errors, by cause
	latency     histogram.H                  // fetch-to-Do latency, first message of each call
	joined      atomic.Bool                  // joined (Setup ran) and no join or rejoin failed since (Consume returned an error)
	lostAt      atomic.Int64                 // unix nanos the session was found lost; 0 when healthy
	memberID    atomic.Pointer[string]       // this member's ID as its last session or claim saw it; nil before the first
	joinFailure atomic.Pointer[string]       // the error of the last join or rejoin that failed, until a session starts
	runDone     atomic.Bool                  // Run has returned
	history     *history                     // committed offsets last read back (readback.go)
	lost        *lostFinals                  // final commits of claims that did not reach the coordinator (lostfinal.go)

	offs   offsetCounters // reset.go, markers.go
	probes sync.WaitGroup // side fetches of markers.go and reads of commit metadata (resume.go), waited for after the client closes

	claimsMu sync.Mutex
	claims   map[*claimState]struct{}
	commits  *sessionCommits  // every sess.Commit goes through it
	fetches  committedFetches // every read of one partition's committed offset goes through it
	// past are the outcomes, per partition, that no live claim holds:
	// those of the claims that ended (each adds its counts as it ends), and
	// those of messages that ended outside their partition's claim: parked
	// messages redelivered from the parked queue (parked.go), and dead
	// letters and parks written, and messages skipped for want of a
	// destination, after their owner let go of them (finishWritten,
	// countUnclaimed). Stats adds them to the live claim's.
	past map[topicPartition]Outcomes

	// stopping is closed when Run's ctx ends: claim loops drain, commit
	// and return while sarama's session still lives (see Run).
	stopping chan struct{}
}

// workerState is one worker's scratch for Do calls, and what Messages
// reads during them.
type workerState[T any] struct {
	vals     []T
	items    []*dispatch.Item[Message, T]
	msgs     []*Message
	verdicts []merge.Verdict
	info     batchInfo
}

// messages builds the current call's messages for Messages(ctx).
func (w *workerState[T]) messages() []*Message {
	if w.items == nil {
		return nil
	}
	w.msgs = w.msgs[:0]
	for _, it := range w.items {
		w.msgs = append(w.msgs, &it.Msg)
	}
	return w.msgs
}

// counters are the group-wide counters not kept by merge or per claim.
type counters struct {
	decodeErrors     atomic.Int64
	panics           atomic.Int64
	dropped          atomic.Int64
	abandoned        atomic.Int64
	revokes          atomic.Int64
	claims           atomic.Int64
	resumed          atomic.Int64
	resumedWaiting   atomic.Int64
	redelivered      atomic.Int64
	metadataFull     atomic.Int64
	metadataRejected atomic.Int64
	// totals of claims that ended
	fetched   atomic.Int64
	committed atomic.Int64
}

// New validates cfg and h and returns a Group ready to Run. Errors wrap
// ErrConfig and name the offending field.
func New[T any](cfg Config, h Handler[T]) (*Group[T], error) {
	if err := h.validate(); err != nil {
		return nil, err
	}
	set := cfg
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g := &Group[T]{
		cfg:         cfg,
		h:           h,
		log:         cfg.Logger.With(zap.String("group", cfg.GroupID)),
		seed:        maphash.MakeSeed(),
		workers:     make([]workerState[T], cfg.Num),
		pool:        merge.NewStats(cfg.Num),
		claims:      make(map[*claimState]struct{}),
		commits:     newSessionCommits(),
		past:        make(map[topicPartition]Outcomes),
		stopping:    make(chan struct{}),
		outageLimit: -1,
		history:     &history{group: cfg.GroupID, offsets: map[topicPartition]int64{}},
		lost:        newLostFinals(cfg.Sarama.Consumer.Group.Session.Timeout + cfg.Sarama.Consumer.Group.Rebalance.Timeout),
	}
	cfg.warnSettings(set, g.log)
	g.fail = newFailures(g)
	g.sched = dispatch.New[Message, T](dispatch.Options[Message, T]{
		Size: cfg.Size, MaxInFlight: cfg.MaxInFlight, MaxInFlightBytes: cfg.MaxInFlightBytes,
		Window: cfg.Chan, WakeDelay: wakeDelay, Backlog: backlog(cfg), Reset: resetFunc(h), Hold: g.fail.hold, Copied: copiedFunc(h), CopyError: ErrTimeout,
		// Msg.Attempt is the attempt a message last showed: 1 from
		// intake, or the attempt it resumed at (from a previous owner's
		// commit metadata, or the parked queue). It falls behind the
		// item's Attempt only when a failure is charged (Uncharge takes
		// back only the latest charge), and the hold hook shows the
		// attempt of the retries it counts. So a message handed out above
		// the attempt it showed is a retry the hook did not count (a lane
		// mate charged behind a failed first item, an orphan's copy),
		// counted here once, whatever splits call it again.
		// An attempt past MaxAttempts is never run (a lane mate charged
		// past it is dead-lettered in its turn, here or by the next
		// owner): no retry to count.
		ShowAttempt: func(m *Message, attempt int) {
			if m.Attempt != attempt {
				if attempt > m.Attempt && !cfg.Retry.exhausted(attempt) {
					g.fail.retried.Add(1)
				}
				m.Attempt = attempt
			}
		},
	})
	g.fail.outage.onStart = g.outageBegan
	g.fail.outage.onEnd = g.outageEnded
	g.fail.outage.limit = g.setLimit
	for i := range g.workers {
		w := &g.workers[i]
		w.vals = make([]T, 0, cfg.Size)
		w.info.messages = w.messages
	}
	return g, nil
}

// Run joins the group and consumes until ctx ends. Then it stops fetching,
// lets started batches finish (up to DrainTimeout), commits the frontier of
// every partition, leaves the group and returns once every goroutine it
// started has stopped. It returns nil after a clean shutdown, and when ctx
// ends while it still connects (a broker that accepts and does not answer
// holds sarama's connect for Net.ReadTimeout per try), soon after.
//
// Errors it cannot get past end it the same way (drain, commit, leave)
// and are returned: ErrConnect when the brokers cannot be reached at
// start, ErrAuth when they refuse the credentials, ErrNotAuthorized when
// an ACL denies the group or a topic, ErrUnknownTopic when a topic does
// not exist. Other consumer errors while running (a broker restarting, a
// coordinator moving, a rebalance in progress, a failed commit) are
// logged, counted in Stats.Errors by cause and retried; they do not end
// Run.
//
// Run returns only after every Do call has returned: Do's ctx is cancelled
// (ErrShutdown) once the partitions are drained, and a Do that ignores it
// keeps Run from returning. Do's ctx keeps ctx's values (not its end): a
// logger, say, but also a tracing span, which would become the parent of
// every call's span; start Run from a ctx that carries none.
func (g *Group[T]) Run(ctx context.Context) error {
	if !g.started.CompareAndSwap(false, true) {
		return ErrRunTwice
	}
	defer g.runDone.Store(true)
	// Connecting takes no ctx in sarama: the start dialer ends it when ctx
	// does (a start cut short that way is a clean stop: nil).
	dialer := useStartDialer(g.cfg.Sarama)
	abortStart := context.AfterFunc(ctx, dialer.abort)
	defer abortStart()
	stopped := func(err error) error {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	client, err := sarama.NewClient(g.cfg.Brokers, g.cfg.Sarama)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		cls, fatal := classify(err)
		g.errs.add(cls)
		if fatal != nil {
			return fmt.Errorf("%w: brokers %v (group %q): %w", fatal, g.cfg.Brokers, g.cfg.GroupID, err)
		}
		return fmt.Errorf("%w %v (group %q): %w", ErrConnect, g.cfg.Brokers, g.cfg.GroupID, err)
	}
	defer g.probes.Wait() // after client.Close (defers run last first); a side fetch still waiting ends by Net.ReadTimeout at the latest
	defer client.Close()
	if err := g.checkTopics(client); err != nil {
		return stopped(err)
	}
	if g.history, err = loadHistory(g.cfg.GroupID, g.cfg.DataPath); err != nil {
		g.errs.add(errOffsets)
		g.log.Warn("ignoring the committed offsets seen before this start: a rewind across it goes unseen", zap.Error(err))
	}
	cg, err := sarama.NewConsumerGroupFromClient(g.cfg.GroupID, client)
	if err != nil {
		return stopped(fmt.Errorf("%w %v (group %q): %w", ErrConnect, g.cfg.Brokers, g.cfg.GroupID, err))
	}
	g.client = client
	if err := g.fail.open(client); err != nil {
		_ = cg.Close()
		return stopped(err)
	}
	dialer.started()
	runCtx, endRun := context.WithCancelCause(ctx)
	defer endRun(nil)
	stopWorkers, err := g.startWorkers(runCtx)
	if err != nil {
		_ = cg.Close()
		_ = g.fail.close()
		return err
	}

	var errs sync.WaitGroup
	errs.Go(func() {
		for err := range cg.Errors() {
			if fatal := g.consumerError(err); fatal != nil {
				endRun(fatal)
			}
		}
	})

	// Shutdown drains and commits before sarama's session is told to end:
	// cancelling Consume's context in the middle of a cooperative rejoin
	// aborts the rejoin, and sarama then sends the final commits (held
	// back during the rejoin) with the old generation, which the broker
	// rejects; the next owner would handle that work again. Claim loops
	// that drain on their own commit once the rejoin is through, and
	// their return ends the session.
	consumeCtx, cancelConsume := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelConsume()
	var shutdown sync.WaitGroup
	shutdown.Go(func() {
		select {
		case <-runCtx.Done():
		case <-consumeCtx.Done():
			return
		}
		close(g.stopping)
		g.awaitClaims(g.cfg.DrainTimeout + g.cfg.Sarama.Consumer.Group.Rebalance.Timeout)
		cancelConsume()
	})

	b := &binding[T]{g: g}
	wait := g.cfg.Retry.Backoff
	var fence instanceFence // who fenced this member, when a join is refused for it
	for runCtx.Err() == nil {
		err := cg.Consume(consumeCtx, g.cfg.Topics, b) // returns at each eager rebalance
		if err == nil || runCtx.Err() != nil {
			wait = g.cfg.Retry.Backoff
			fence = instanceFence{}
			continue
		}
		if errors.Is(err, sarama.ErrClosedConsumerGroup) {
			break
		}
		// Out of the group until a join succeeds (Setup): not Ready.
		g.joined.Store(false)
		failure := err.Error()
		g.joinFailure.Store(&failure)
		cls, fatal := classify(err)
		g.errs.add(cls)
		if errors.Is(err, sarama.ErrFencedInstancedId) {
			fatal = g.checkFence(runCtx, &fence, client, time.Now())
		}
		if fatal != nil { // Run returns it: its caller logs it, once
			endRun(fmt.Errorf("%w: group %q, topics %v: %w", fatal, g.cfg.GroupID, g.cfg.Topics, err))
			break
		}
		if errors.Is(err, sarama.ErrInconsistentGroupProtocol) {
			g.log.Warn("cannot join: the group's members use other assignment strategies; retrying until they leave or one of this member's strategies is theirs too",
				zap.Strings("topics", g.cfg.Topics), zap.Strings("strategies", strategyNames(g.cfg.Sarama)), zap.Duration("backoff", wait), zap.Error(err))
		} else {
			g.log.Warn("consume failed; retrying", zap.Strings("topics", g.cfg.Topics), zap.Duration("backoff", wait), zap.Error(err))
		}
		t := time.NewTimer(wait)
		select {
		case <-runCtx.Done():
		case <-t.C:
		}
		t.Stop()
		wait = min(2*wait, g.cfg.Retry.MaxBackoff)
	}
	endRun(nil)
	shutdown.Wait()
	g.joined.Store(false)
	cancelConsume()
	if err := cg.Close(); err != nil {
		g.errs.add(errOther)
		g.log.Warn("closing consumer group", zap.Error(err))
	}
	errs.Wait()
	stopErr := stopWorkers()
	if err := g.history.save(); err != nil {
		g.log.Warn("saving the committed offsets seen failed: a REWIND across this restart may go unseen", zap.Error(err))
	}
	if err := context.Cause(runCtx); err != nil && ctx.Err() == nil {
		return errors.Join(err, stopErr) // a fatal error ended Run, not its caller
	}
	return stopErr
}

// checkTopics makes sure every configured topic exists, the dead-letter
// topic included (after sarama's metadata retries), so that a misspelt
// topic ends Run at once, with an *UnknownTopicError naming it.
func (g *Group[T]) checkTopics(client sarama.Client) error {
	if err := client.RefreshMetadata(g.cfg.Topics...); err != nil {
		return g.topicError(client, err, g.cfg.Topics, false)
	}
	if t := g.cfg.DeadLetterTopic; t != "" {
		if err := client.RefreshMetadata(t); err != nil {
			return g.topicError(client, err, []string{t}, true)
		}
	}
	return nil
}

// topicError counts err, from refreshing the metadata of topics (the
// dead-letter topic when deadLetter), and returns the error Run ends
// with.
func (g *Group[T]) topicError(client sarama.Client, err error, topics []string, deadLetter bool) error {
	cls, fatal := classify(err)
	g.errs.add(cls)
	if fatal == ErrUnknownTopic {
		return &UnknownTopicError{Group: g.cfg.GroupID, Topics: absentTopics(client, topics),
			DeadLetter: deadLetter, Err: err, asked: topics}
	}
	if fatal == nil {
		fatal = ErrConnect
	}
	what := fmt.Sprintf("topics %v", topics)
	if deadLetter {
		what = fmt.Sprintf("dead-letter topic %q", topics[0])
	}
	return fmt.Errorf("%w: group %q, %s: %w", fatal, g.cfg.GroupID, what, err)
}

// absentTopics are the topics, each once, that client's metadata lacks
// after a refresh of them failed: sarama drops a topic the broker
// answered UNKNOWN_TOPIC_OR_PARTITION or INVALID_TOPIC for, and keeps
// those it described.
func absentTopics(client sarama.Client, topics []string) []string {
	known, err := client.Topics()
	if err != nil {
		return nil
	}
	var absent []string
	for _, t := range topics {
		if !slices.Contains(known, t) && !slices.Contains(absent, t) {
			absent = append(absent, t)
		}
	}
	return absent
}

// awaitClaims waits until no claim loop runs, or at most limit.
func (g *Group[T]) awaitClaims(limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		g.claimsMu.Lock()
		n := len(g.claims)
		g.claimsMu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startWorkers starts the worker pool, the failure path and the commit
// loop. Do calls see a context that outlives ctx: a shutdown lets started
// batches finish, and only gives up on them (cancels their context with
// ErrShutdown) once every partition is drained, in stop.
func (g *Group[T]) startWorkers(ctx context.Context) (stop func() error, err error) {
	workCtx, cancelWork := context.WithCancelCause(context.WithoutCancel(ctx))
	if err := g.fail.start(workCtx); err != nil {
		cancelWork(err)
		return nil, err
	}
	var exhausted func(attempt int) bool // nil without a limit: no batch is searched
	if g.cfg.Retry.MaxAttempts > 0 {
		exhausted = g.cfg.Retry.exhausted
	}
	pool := merge.Start(workCtx, g.sched, merge.Config{
		Num:          g.cfg.Num,
		Ticker:       g.cfg.Ticker,
		Timeout:      g.cfg.MsgTimeout,
		TimeoutCause: ErrTimeout,
		Grace:        stuckGrace(g.cfg.MsgTimeout),
		OnStuck:      g.onStuck,
		NoSplit:      g.fail.outage.on,
		Rejected:     func(err error) bool { return errors.Is(err, ErrRejected) },
		Exhausted:    exhausted,
		Context: func(ctx context.Context, worker int) context.Context {
			return context.WithValue(ctx, batchKey{}, &g.workers[worker].info)
		},
	}, g.handle, g.pool)
	g.workerPool.Store(pool)
	stopCommits := make(chan struct{})
	var commits sync.WaitGroup
	commits.Go(func() { g.commitLoop(stopCommits) })
	commits.Go(func() { g.readBackLoop(stopCommits) })
	return func() error {
		close(stopCommits)
		commits.Wait()
		g.fail.stopRedelivery() // before the calls' ctx ends: what finishes in time is finished in the parked queue
		cancelWork(ErrShutdown)
		pool.Stop()
		return g.fail.close()
	}, nil
}

// stuckGrace is how long past MsgTimeout a call may run before its worker
// counts as stuck: a tenth of MsgTimeout, between 1s and 30s.
func stuckGrace(timeout time.Duration) time.Duration {
	return min(max(timeout/10, time.Second), 30*time.Second)
}

// onStuck logs a worker whose Do ignored its cancelled ctx past
// MsgTimeout plus grace (merge.Config.OnStuck).
// With Unordered its messages are handed to other workers (Orphan) and
// what the hung call reports is ignored.
func (g *Group[T]) onStuck(worker int, call uint64, since time.Time) {
	p := g.workerPool.Load()
	if p == nil {
		return
	}
	w := p.Worker(worker)
	first, lane, n := g.sched.Running(w, call) // before Orphan lets the batch go
	if n == 0 {
		return // the call returned since the watchdog looked: nothing hangs
	}
	redelivered := 0
	if g.cfg.Ordering == Unordered {
		redelivered = g.sched.Orphan(w, call)
		g.ctr.redelivered.Add(int64(redelivered))
	}
	g.log.Warn("worker stuck: Do ran past MsgTimeout and ignored its ctx", zap.Int("worker", worker),
		zap.String("topic", first.Topic), zap.Int32("partition", first.Partition), zap.Int64("offset", first.Offset),
		zap.Uint64("lane", lane), zap.Int("attempt", first.Attempt), zap.Int("batch", n),
		zap.Duration("running", time.Since(since)), zap.Duration("timeout", g.cfg.MsgTimeout),
		zap.Int("redelivered", redelivered))
}

// Pause stops handing batches to Do (the ones in Do finish); fetching
// pauses on its own as the partitions' shares fill. For operators, and for
// handlers that know their dependency is down. Resume undoes it.
func (g *Group[T]) Pause() {
	g.limitMu.Lock()
	g.paused.Store(true)
	g.sched.SetLimit(0)
	g.limitMu.Unlock()
	g.log.Info("paused")
}

// Resume lets Do run again after Pause (as far as an outage lets it).
func (g *Group[T]) Resume() {
	g.limitMu.Lock()
	g.paused.Store(false)
	g.sched.SetLimit(g.outageLimit)
	g.limitMu.Unlock()
	g.log.Info("resumed")
}

// setLimit is the outage's limit on batches running at once; Pause wins.
func (g *Group[T]) setLimit(n int) {
	g.limitMu.Lock()
	g.outageLimit = n
	if !g.paused.Load() {
		g.sched.SetLimit(n)
	}
	g.limitMu.Unlock()
}

// outageBegan: most items fail over many lanes (see outage).
func (g *Group[T]) outageBegan() {
	g.log.Warn("most Do calls fail across many lanes: backing off as a whole, one probe at a time, failures not charged",
		zap.Int64("outages", g.fail.outage.count.Load()))
}

func (g *Group[T]) outageEnded(d time.Duration) {
	g.log.Info("a Do call succeeded again: outage over", zap.Duration("lasted", d), zap.Int64("probes", g.fail.outage.probes.Load()))
}

// consumerError counts and logs an error sarama reported while consuming
// or committing, and returns the error Run must end with, if any.
func (g *Group[T]) consumerError(err error) error {
	cls, fatal := classify(err)
	g.errs.add(cls)
	// A lost session is not recorded here: this reader may see an old
	// generation's refused commit after the member has joined again. The
	// claims record it (released), before sarama starts the next session.
	var ce *sarama.ConsumerError
	switch {
	case fatal != nil && cls != errTopic:
		// Run ends with it: whoever called Run logs it.
	case !errors.As(err, &ce):
		g.errLog[cls].Error(g.log, "consumer error", zap.Error(err))
	case cls == errMetadata:
		g.metadataRejected(ce.Topic, ce.Partition, ce.Err)
	case cls == errOutOfRange:
		return g.outOfRange(ce) // reset.go
	default:
		g.errLog[cls].Error(g.log, "consumer error", zap.String("topic", ce.Topic), zap.Int32("partition", ce.Partition), zap.Error(ce.Err))
	}
	if fatal == nil || cls == errTopic {
		// A partition's fetch reporting an unknown topic is a topic
		// deleted or being recreated: the next rebalance sees it.
		return nil
	}
	return fmt.Errorf("%w: group %q: %w", fatal, g.cfg.GroupID, err)
}

// handle is merge's Handle: it calls Do with the items' values.
func (g *Group[T]) handle(ctx context.Context, worker int, items []*dispatch.Item[Message, T]) ([]merge.Verdict, error) {
	w := &g.workers[worker]
	vals := w.vals[:0] // cap Size: never reallocates, never written back
	for _, it := range items {
		vals = append(vals, it.Val)
	}
	w.items = items
	var end func(error)
	if g.cfg.Trace != nil {
		ctx, end = g.cfg.Trace(ctx, w.messages())
	}
	err := g.call(ctx, vals)
	if end != nil {
		end(err)
	}
	w.items = nil
	clear(vals)
	clear(w.msgs)
	if err == nil {
		g.fail.outage.ok(len(items))
		// End-to-end latency: one observation per call, of its oldest
		// message (its first), so that it costs a clock read per call,
		// not per message.
		if ts := items[0].Msg.Timestamp; !ts.IsZero() {
			g.latency.Observe(time.Since(ts))
		}
		return nil, nil
	}
	var verdicts []merge.Verdict
	if be, sole := AsBatchError(err); be != nil && sole {
		var ok bool
		if w.verdicts, ok = be.verdicts(w.verdicts, len(items)); ok {
			verdicts = w.verdicts
			g.fail.outage.ok(len(items) - len(verdicts))
		} else if be.Len() == 0 {
			g.fail.outage.ok(len(items))
			return nil, nil // a BatchError naming nothing: all done
		}
		// Otherwise the batch failed as a whole: a BatchError that names
		// nothing within the batch.
	}
	first := &items[0].Msg
	pastTimeout := g.cfg.MsgTimeout > 0 && merge.PastTimeout(ctx, ErrTimeout)
	if !pastTimeout && ctx.Err() == nil && merge.OnlyDeferred(verdicts) {
		// No failure (Stats.DeferredCalls): a throttled endpoint's
		// deferrals are not warned of as failures; at debug, per call.
		// Once the call's ctx ended (a timeout, a revoke, a shutdown) the
		// pool ignores its verdicts and counts a failed call.
		if ce := g.log.Check(zapcore.DebugLevel, "Do deferred items; they run again when due"); ce != nil {
			ce.Write(zap.String("topic", first.Topic), zap.Int32("partition", first.Partition),
				zap.Int64("offset", first.Offset), zap.Uint64("lane", items[0].Lane),
				zap.Int("attempt", items[0].Attempt), zap.Int("batch", len(items)), zap.Int("named", len(verdicts)))
		}
		return verdicts, err
	}
	logged := err
	if pastTimeout {
		logged = merge.TimeoutError(ErrTimeout, err) // as the pool will charge it
	}
	g.failLog.Warn(g.log, "Do failed; its failing items are retried or dead-lettered",
		zap.String("topic", first.Topic), zap.Int32("partition", first.Partition),
		zap.Int64("offset", first.Offset), zap.Uint64("lane", items[0].Lane),
		zap.Int("attempt", items[0].Attempt), zap.Int("batch", len(items)), zap.Int("named", len(verdicts)), zap.Error(logged))
	return verdicts, err
}

func (g *Group[T]) call(ctx context.Context, vals []T) (err error) {
	defer func() {
		if r := recover(); r != nil {
			g.ctr.panics.Add(1)
			err = fmt.Errorf("%w in Do: %v\n%s", ErrPanic, r, debug.Stack())
		}
	}()
	return g.h.Do(ctx, vals)
}

// resetFunc clears a recycled item: the slices that point into sarama's
// fetch buffers, and the decoded value unless it is the message itself.
// Every other field is overwritten when the item is reused.
func resetFunc[T any](h Handler[T]) func(m *Message, v *T) {
	if h.New == nil {
		return func(m *Message, _ *T) { m.Key, m.Value, m.Headers = nil, nil, nil }
	}
	return func(m *Message, v *T) {
		m.Key, m.Value, m.Headers = nil, nil, nil
		var zero T
		*v = zero
	}
}

// copiedFunc points a copied item's value at the copy's message when the
// value is the message itself (Handler.New nil).
func copiedFunc[T any](h Handler[T]) func(m *Message, v *T) {
	if h.New != nil {
		return nil
	}
	return func(m *Message, v *T) { *v = any(m).(T) }
}

// decode runs New and Split for m, turning a panic into an error.
func (g *Group[T]) decode(m *Message) (v T, lane uint64, err error) {
	if g.h.New == nil && (g.h.Split == nil || g.cfg.Ordering != OrderLanes) {
		// Nothing of the user's to run: no recover needed.
		return any(m).(T), g.lane(m), nil
	}
	return g.decodeUser(m)
}

// lane is m's ordering lane when Split does not decide it: a hash of the
// key (OrderLanes), one lane for the partition (OrderPartition), or a lane
// of its own (Unordered: no message waits for another).
func (g *Group[T]) lane(m *Message) uint64 {
	switch g.cfg.Ordering {
	case OrderPartition:
		return 0
	case Unordered:
		return uint64(m.Offset)
	}
	return maphash.Bytes(g.seed, m.Key)
}

func (g *Group[T]) decodeUser(m *Message) (v T, lane uint64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w in New or Split: %v", ErrPanic, r)
		}
	}()
	if g.h.New != nil {
		if v, err = g.h.New(m); err != nil {
			return v, 0, err
		}
	} else {
		v = any(m).(T)
	}
	if g.h.Split != nil && g.cfg.Ordering == OrderLanes {
		return v, g.h.Split(m, v), nil
	}
	return v, g.lane(m), nil
}

// Stats returns a snapshot of the group's counters. Safe to call from any
// goroutine, at any time.
func (g *Group[T]) Stats() Stats {
	s := Stats{
		GroupID:          g.cfg.GroupID,
		Handled:          g.pool.Handled(),
		Batches:          g.pool.Batches(),
		Failures:         g.pool.Failures.Load(),
		DeferredCalls:    g.pool.DeferredCalls.Load(),
		Retries:          g.fail.retried.Load(),
		Splits:           g.pool.Splits.Load(),
		Cancelled:        g.pool.Cancelled.Load(),
		DecodeErrors:     g.ctr.decodeErrors.Load(),
		Panics:           g.ctr.panics.Load(),
		Dropped:          g.ctr.dropped.Load(),
		Abandoned:        g.ctr.abandoned.Load(),
		Revokes:          g.ctr.revokes.Load(),
		Claims:           g.ctr.claims.Load(),
		Resumed:          g.ctr.resumed.Load(),
		ResumedWaiting:   g.ctr.resumedWaiting.Load(),
		MetadataFull:     g.ctr.metadataFull.Load(),
		MetadataRejected: g.ctr.metadataRejected.Load(),
		InFlight:         g.sched.InFlight(),
		TimedOut:         g.pool.TimedOut.Load(),
		Redelivered:      g.ctr.redelivered.Load(),
		Stuck:            g.pool.Stuck.Load(),
		Paused:           g.paused.Load(),
	}
	f := g.fail
	s.Retrying, s.Deferred = f.retrying.Load(), f.deferred.Load()
	s.Outages, s.Outage = f.outage.count.Load(), f.outage.on()
	d := f.dead
	s.DeadLettered = DeadLetterCounts{MaxAttempts: d.byReason[0].Load(), Rejected: d.byReason[1].Load(),
		Timeout: d.byReason[2].Load(), Poison: d.byReason[3].Load()}
	s.DeadLetterSkipped, s.DeadLetterErrors, s.DeadLetterPending = d.skipped.Load(), d.writeErrors.Load(), d.pending.Load()
	s.DeadLetterDestination = g.deadLetterDestination()
	if pk := f.parkView.Load(); pk != nil {
		s.Parked, s.ParkErrors = pk.parked.Load(), pk.writeErrors.Load()
	}
	if p := g.workerPool.Load(); p != nil {
		s.StuckWorkers = int64(p.StuckNow())
	}
	s.ErrorsBy, s.Errors = g.errs.snapshot()
	g.offs.fill(&s)
	s.Status = PartitionStatus{Code: StatusOK}
	if p := g.workerPool.Load(); p != nil {
		p.CallDurations(&s.DoDuration)
		now := time.Now()
		for _, w := range p.Workers(nil) {
			ws := WorkerStats{Busy: w.Busy, Stuck: w.Stuck}
			if w.Busy {
				ws.BatchAge = now.Sub(w.Since)
			}
			s.Workers = append(s.Workers, ws)
		}
	}
	g.latency.AddTo(&s.Latency)
	g.claimsMu.Lock()
	s.Fetched, s.Committed = g.ctr.fetched.Load(), g.ctr.committed.Load()
	s.PartitionStats = make([]PartitionStats, 0, len(g.claims))
	for c := range g.claims {
		s.Partitions++
		s.Fetched += c.fetched.Load()
		s.Committed += c.committed.Load()
		s.FinishedAbove += c.finishedAbove.Load()
		s.Lag += c.lag()
		ps := c.stats()
		tp := topicPartition{c.topic, c.part}
		ps.Outcomes.add(g.past[tp])
		if ps.Status.Code.severity() > s.Status.Code.severity() {
			s.Status = PartitionStatus{Code: ps.Status.Code, Reason: fmt.Sprintf("%s/%d: %s", ps.Topic, ps.Partition, ps.Status.Reason)}
		}
		s.PartitionStats = append(s.PartitionStats, ps)
	}
	g.claimsMu.Unlock()
	slices.SortFunc(s.PartitionStats, func(a, b PartitionStats) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return s
}

// Ready reports whether the group has joined and not lost its session
// since, until it starts to stop: a standby member with no partitions is
// ready too. A join or rejoin that fails (no broker reachable, say) makes
// it false until a join succeeds; an eager rebalance that rejoins at once
// does not. It turns false for good once Run's ctx ends (or a fatal error
// ends Run), while the partitions drain and before Run returns: what a
// readiness probe wants of a member on its way out.
func (g *Group[T]) Ready() bool {
	ready, _ := g.Readiness()
	return ready
}

// Readiness is Ready with the reason when it is false: stopped (Run
// returned), stopping (Run's ctx ended, or an error it cannot get past),
// the session lost, not joined yet (and the first join's error, if it
// failed), or out of the group since a rejoin failed (and its error).
func (g *Group[T]) Readiness() (ready bool, reason string) {
	// The member ID before joined: a session stores joined, then the ID,
	// so an ID seen with joined false is a later failure's.
	member, lost := g.memberID.Load(), g.lostAt.Load()
	switch {
	case g.runDone.Load():
		return false, "stopped: Run returned"
	case g.isStopping():
		return false, "stopping: Run's ctx ended (or an error it cannot get past); draining"
	case lost != 0:
		return false, fmt.Sprintf("group session lost %v ago (evicted, or its final commits refused); joining again", time.Since(time.Unix(0, lost)).Round(time.Second))
	case g.joined.Load():
		return true, ""
	}
	failed := ""
	if p := g.joinFailure.Load(); p != nil {
		failed = ": " + *p
	}
	switch {
	case member == nil && failed == "":
		return false, "not joined yet"
	case member == nil:
		return false, "not joined yet: the join failed" + failed + "; retrying"
	}
	return false, "out of the group: a rejoin failed" + failed + "; retrying"
}

// isStopping reports whether Run has begun to stop (g.stopping closed).
func (g *Group[T]) isStopping() bool {
	select {
	case <-g.stopping:
		return true
	default:
		return false
	}
}

// Live reports whether the group is alive, and why not: no worker stuck
// past MsgTimeout plus its grace, and the group session not lost for
// longer than Status.LostAfter. Lag does not count.
func (g *Group[T]) Live() (bool, string) {
	if p := g.workerPool.Load(); p != nil {
		if n := p.StuckNow(); n > 0 {
			return false, fmt.Sprintf("%d workers stuck in Do past MsgTimeout (%v) and its grace", n, g.cfg.MsgTimeout)
		}
	}
	if at := g.lostAt.Load(); at != 0 {
		if d := time.Since(time.Unix(0, at)); d > g.cfg.Status.LostAfter {
			return false, fmt.Sprintf("group session lost %v ago", d.Round(time.Second))
		}
	}
	return true, ""
}
