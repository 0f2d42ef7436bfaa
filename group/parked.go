package group

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/orderly-go/orderly/dispatch"
	"github.com/orderly-go/orderly/internal/lograte"
	"github.com/orderly-go/orderly/localqueue"
)

// parking is the Unordered failure path with a DataPath: a message that
// failed or was deferred, due later than ParkAfter, is parked: written
// into a durable localqueue.Queue under DataPath (deferred until due) and
// synced before its item finishes, so the commit frontier never waits for
// it. When due, the queue hands it back and it runs again, on a side
// partition that feeds the same workers, until it succeeds (Finish) or is
// dead-lettered. Parked messages belong to the process that parked them:
// they come back after a restart from the same DataPath, whatever happened
// to their partition meanwhile (at-least-once).
type parking[T any] struct {
	g    *Group[T]
	q    *localqueue.Queue
	side *dispatch.Partition[Message, T] // owned by redeliver

	// stop asks redeliver to stop (stopRedelivery); redelivered is closed
	// once it has drained the side partition and returned.
	stop        chan struct{}
	stopOnce    sync.Once
	redelivered chan struct{}

	mu    sync.Mutex
	queue []parkJob[T]
	kick  chan struct{}
	taken map[int64]sideMsg // side items by their side offset (a copy of an orphaned item has its offset)
	seq   int64             // side partition's offsets

	ends []sideEnd // the side items a pass of advance took back; redeliver's, reused across passes

	parked      atomic.Int64 // messages parked now
	writeErrors atomic.Int64
	errLog      lograte.Limit
}

// sideMsg is a side item's parked message as redeliver took it from the
// queue.
type sideMsg struct {
	id localqueue.ID
	// queued: id is still the item's to finish; not once the item is
	// parked again (Replace finished it, or a new copy was put).
	queued bool
	// attempt is the item's Attempt when taken: the failed attempts
	// charged to it before were counted when it was parked.
	attempt int
}

// sideEnd is a side item that finished, as collect noted it: the item is
// recycled as its pass goes on.
type sideEnd struct {
	off     int64 // its side offset, its key in parking.taken
	tp      topicPartition
	fate    uint8
	attempt int
	msg     sideMsg // settle's, from parking.taken
}

type parkJob[T any] struct {
	it       *dispatch.Item[Message, T]
	delay    time.Duration
	deferred bool
	err      error // the last write's error
}

func newParking[T any](g *Group[T], sc *localqueue.Scanner) (*parking[T], error) {
	q, err := localqueue.Open(localqueue.Options{
		Name:          "orderly-parked",
		DataPath:      g.cfg.DataPath,
		MaxReqTimeout: maxDelay,
		MaxMsgSize:    64 << 20,
		MsgTimeout:    24 * time.Hour, // in flight while it runs again; a crash brings it back
		MaxMsgTimeout: 7 * 24 * time.Hour,
		Scanner:       sc,
		Logger:        g.log,
	})
	if err != nil {
		return nil, fmt.Errorf("group: parked messages under %s: %w", g.cfg.DataPath, err)
	}
	p := &parking[T]{g: g, q: q, kick: make(chan struct{}, 1), taken: make(map[int64]sideMsg),
		stop: make(chan struct{}), redelivered: make(chan struct{})}
	// What a previous run left: every parked message is in the queue's
	// journal (PutDeferred and Replace write it there), which counts
	// messages, where Depth counts backend records, dedup markers and
	// stale copies a crash left included.
	p.parked.Store(int64(q.Stats().Journaled))
	return p, nil
}

// add parks it, to run again after delay (deferred: a deferral, not a
// failure).
func (p *parking[T]) add(it *dispatch.Item[Message, T], delay time.Duration, deferred bool) {
	// A revoke from here on leaves it outstanding: the drain waits for the
	// park, and the final commit passes it, so that the parked copy is its
	// only delivery after the handoff.
	p.g.sched.Finishing(it)
	p.mu.Lock()
	p.queue = append(p.queue, parkJob[T]{it: it, delay: delay, deferred: deferred})
	p.mu.Unlock()
	notify(p.kick)
}

func (p *parking[T]) start(ctx context.Context, wg *sync.WaitGroup) {
	p.side = p.g.sched.NewSidePartition(p.g.cfg.Chan)
	wg.Go(func() { p.park(ctx) })
	wg.Go(func() { p.redeliver(ctx) })
}

// stopRedelivery stops handing parked messages out and waits until the
// side partition has drained (see drain). Call it before the workers' ctx
// is cancelled, so that what finishes in time is finished in the queue.
func (p *parking[T]) stopRedelivery() {
	p.stopOnce.Do(func() { close(p.stop) })
	<-p.redelivered
}

func (p *parking[T]) close() error { return p.q.Close() }

// park writes the queued jobs, syncs once for all of them, and only then
// lets their items finish.
func (p *parking[T]) park(ctx context.Context) {
	var jobs, written []parkJob[T]
	for {
		select {
		case <-p.kick:
		case <-ctx.Done():
			return
		}
		p.mu.Lock()
		jobs, p.queue = append(jobs, p.queue...), p.queue[:0]
		p.mu.Unlock()
		ok := p.g.retryWrites(ctx, func() error {
			jobs, written = p.write(jobs, written)
			if err := p.writeErr(jobs); err != nil {
				return err
			}
			return p.q.Sync()
		}, func(err error, wait time.Duration) {
			p.writeErrors.Add(1)
			p.errLog.Warn(p.g.log, "parking messages failed; retrying", zap.String("path", p.g.cfg.DataPath),
				zap.Int("messages", len(jobs)+len(written)), zap.Duration("backoff", wait), zap.Error(err))
		})
		if !ok {
			return // the items stay held: nothing is committed past them
		}
		for _, j := range written {
			j.it.Fate = fateParked
			p.g.finishWritten(j.it, func() bool { return p.g.sched.FinishHeld(j.it) })
		}
		clear(written)
		written, jobs = written[:0], jobs[:0]
	}
}

// write parks each job, deferred, and returns the jobs whose write failed
// (to retry) and those written (to finish once synced). Every job is
// written anew with its attempt count: a side item (a parked message that
// failed again) replaces its queue message in one journal record
// (localqueue's Replace), so that a crash leaves one copy of it, the old or
// the new (Requeue would keep the old body, and with it the attempt count
// of the first park, so such a message would never run out of attempts).
//
// A side item whose queue message is no longer in flight (its delivery
// timed out: the queue hands that copy out again) is parked anew beside
// it (at-least-once); a message too large for the queue waits in memory
// instead, as without a DataPath.
func (p *parking[T]) write(jobs, written []parkJob[T]) (failed, _ []parkJob[T]) {
	for _, j := range jobs {
		body := encodeParked(nil, &j.it.Msg, j.it.Attempt, j.it.FirstFailure())
		s, _ := p.sideMsgOf(j.it)
		side := s.queued // its queue message is still the item's to finish
		var err error
		if side {
			_, err = p.q.Replace(s.id, body, j.delay)
			if errors.Is(err, localqueue.ErrNotInFlight) {
				p.forget(j.it)
				side = false
			}
		}
		if !side {
			_, err = p.q.PutDeferred(body, j.delay)
		}
		if errors.Is(err, localqueue.ErrTooLarge) {
			p.g.log.Warn("message too large to park; it waits in memory", zap.String("topic", j.it.Msg.Topic),
				zap.Int32("partition", j.it.Msg.Partition), zap.Int64("offset", j.it.Msg.Offset), zap.Int("bytes", len(body)), zap.Error(err))
			p.g.fail.waitInMemory(j.it, j.delay, j.deferred)
			continue
		}
		if err != nil {
			j.err = fmt.Errorf("%s/%d offset %d: %w", j.it.Msg.Topic, j.it.Msg.Partition, j.it.Msg.Offset, err)
			failed = append(failed, j)
			continue
		}
		if side {
			p.forget(j.it) // it finishes without finishing its queue message again
		} else {
			p.parked.Add(1)
		}
		written = append(written, j)
	}
	return failed, written
}

// writeErr joins the write errors of jobs.
func (p *parking[T]) writeErr(jobs []parkJob[T]) error {
	errs := make([]error, 0, len(jobs))
	for _, j := range jobs {
		errs = append(errs, j.err)
	}
	return errors.Join(errs...)
}

// redeliver hands parked messages back to the workers as they come due, at
// most a claimed partition's share of the in-flight budget at a time (see
// room), and finishes their queue messages as they finish. When Run stops
// (or stopRedelivery asks) it drains the side partition and returns.
func (p *parking[T]) redeliver(ctx context.Context) {
	defer close(p.redelivered)
	got := make(chan *localqueue.Message)
	var getter sync.WaitGroup
	getCtx, stopGetting := context.WithCancel(ctx)
	defer getter.Wait()
	defer stopGetting()
	want := make(chan struct{}, 1)
	getter.Go(func() {
		for {
			select {
			case <-want:
			case <-getCtx.Done():
				return
			}
			// A message got and not handed over stays in flight in
			// the queue: the next run has it.
			m, err := p.q.Get(getCtx)
			if err != nil {
				return
			}
			select {
			case got <- m:
			case <-getCtx.Done():
				return
			}
		}
	})
	asking := false
	for {
		if !asking && p.room() {
			asking = true
			want <- struct{}{}
		}
		select {
		case m := <-got:
			asking = false
			p.intake(m)
		case <-p.side.Wake():
			p.advance()
		case <-p.g.stopping: // Run stops (it closes stopping before stopWorkers)
			stopGetting()
			p.drain(ctx)
			return
		case <-p.stop: // stopWorkers called outside Run (tests)
			stopGetting()
			p.drain(ctx)
			return
		case <-ctx.Done():
			p.drain(ctx)
			return
		}
	}
}

// drain lets the side partition go as a claim lets its partition go:
// nothing more runs, the calls under way get DrainTimeout (or until ctx
// ends) to finish, and each one that finishes has its queue message
// finished; then the partition is sealed, what finished before is taken
// back, and past DrainTimeout the calls still running are cancelled
// (ErrShutdown). They were
// given up on: counted abandoned, not handled, whatever they return, and
// their queue messages stay, for the next run. So does every message
// dropped unrun.
func (p *parking[T]) drain(ctx context.Context) {
	side := p.side
	dropped, abandoned := side.Revoke()
	cause := fmt.Errorf("%w: parked messages under %s after %v", ErrShutdown, p.g.cfg.DataPath, p.g.cfg.DrainTimeout)
	late, inDrain, cancelled, _ := p.g.drainAndSeal(side, cause, p.advance, nil, nil, ctx.Done())
	side.Close()
	p.g.fail.forget(side)
	p.g.ctr.dropped.Add(int64(dropped))
	p.g.ctr.abandoned.Add(int64(abandoned) + inDrain + late)
	// Worded by what the drain did: a late message may be in no call it
	// could cancel (its park or dead letter still being written), and a
	// drain that ctx ended cancels nothing itself.
	msg := "parked messages unfinished when the drain ended: leaving them parked for the next run"
	if cancelled > 0 {
		msg = "parked messages still running after the drain timeout: cancelling, and leaving them parked for the next run"
	}
	if late > 0 {
		p.g.log.Warn(msg, zap.String("path", p.g.cfg.DataPath), zap.Duration("timeout", p.g.cfg.DrainTimeout),
			zap.Int64("unfinished", late), zap.Int("cancelled", cancelled))
	}
}

// room reports whether the side partition may take another parked
// message: what it holds unfinished is below one claimed partition's share
// of MaxInFlight and MaxInFlightBytes, as a claim loop's Room (it takes no
// share itself, so parked messages add at most one share to the budget).
// A smaller bound caps redelivery at that many messages per round trip
// through the workers: Chan, which is 1 when Size is 1, would let one
// parked message run at a time, each waiting its turn behind the
// partitions' queued messages, and redelivery would fall behind the
// parking.
func (p *parking[T]) room() bool {
	count, bytes := p.side.Quota()
	return count > 0 && (p.side.Unfinished() == 0 || bytes > 0)
}

// intake makes a side item of a parked message and queues it.
func (p *parking[T]) intake(m *localqueue.Message) {
	it := p.side.Alloc()
	attempt, first, err := decodeParked(m.Body, &it.Msg)
	if err != nil {
		// A body this process wrote that does not decode: keep it, do
		// not run it.
		p.g.errs.add(errOffsets)
		p.g.log.Error("parked message does not decode; left parked", zap.String("path", p.g.cfg.DataPath),
			zap.String("id", m.ID.String()), zap.Error(err))
		_ = p.side.Skip(it, p.nextSeq())
		_ = p.q.Requeue(m.ID, maxDelay)
		return
	}
	v, _, err := p.g.decode(&it.Msg)
	if err != nil {
		p.g.ctr.decodeErrors.Add(1)
		if err := p.side.Track(it, p.nextSeq(), msgBytes(&it.Msg)); err != nil {
			return
		}
		it.Attempt = attempt
		it.SetFirstFailure(first)
		p.track(it, m.ID, attempt)
		p.g.fail.dead.add(it, func() bool { return p.side.Complete(it) }, reasonPoison, attempt-1, err)
		return
	}
	it.Val, it.Lane = v, uint64(p.seq+1) // a lane of its own, as Unordered has
	if err := p.side.Add(it, p.nextSeq(), msgBytes(&it.Msg)); err != nil {
		return
	}
	it.Attempt = attempt // Add starts them over
	it.SetFirstFailure(first)
	p.track(it, m.ID, attempt)
	p.side.Flush()
}

func (p *parking[T]) nextSeq() int64 { p.seq++; return p.seq }

func (p *parking[T]) track(it *dispatch.Item[Message, T], id localqueue.ID, attempt int) {
	p.mu.Lock()
	p.taken[it.Offset()] = sideMsg{id: id, queued: true, attempt: attempt}
	p.mu.Unlock()
}

// sideMsgOf is side item it's parked message as redeliver took it from
// the queue; false for an item of a claim, or a side item settled.
func (p *parking[T]) sideMsgOf(it *dispatch.Item[Message, T]) (sideMsg, bool) {
	if it.Part() != p.side {
		return sideMsg{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.taken[it.Offset()]
	return s, ok
}

// forget notes that side item it has no queue message left to finish.
func (p *parking[T]) forget(it *dispatch.Item[Message, T]) {
	p.mu.Lock()
	if s, ok := p.taken[it.Offset()]; ok {
		s.queued = false
		p.taken[it.Offset()] = s
	}
	p.mu.Unlock()
}

// advance takes back what the side partition finished and settles it.
func (p *parking[T]) advance() {
	p.side.AdvanceFunc(p.collect)
	p.settle()
}

// collect is the side partition's AdvanceFunc: it notes, for settle, what
// became of a side item (handled, dead-lettered, or parked again) before
// the item is recycled.
func (p *parking[T]) collect(it *dispatch.Item[Message, T]) {
	p.ends = append(p.ends, sideEnd{off: it.Offset(), tp: topicPartition{it.Msg.Topic, it.Msg.Partition},
		fate: it.Fate, attempt: it.Attempt})
}

// settle counts each side item the pass collected in the Outcomes of the
// partition its message came from and, unless it was parked again,
// finishes its queue message: one p.mu and one claimsMu for the pass. It
// counts them all before any message leaves Stats.Parked, so that a
// reader who sees one gone sees its end.
func (p *parking[T]) settle() {
	if len(p.ends) == 0 {
		return
	}
	p.mu.Lock()
	for i := range p.ends {
		e := &p.ends[i]
		e.msg = p.taken[e.off]
		delete(p.taken, e.off)
	}
	p.mu.Unlock()
	p.g.claimsMu.Lock()
	for i := 0; i < len(p.ends); { // a run of one partition's items adds to its outcomes once
		tp := p.ends[i].tp
		o := p.g.past[tp]
		for ; i < len(p.ends) && p.ends[i].tp == tp; i++ {
			o.count(p.ends[i].fate, p.ends[i].attempt-p.ends[i].msg.attempt)
		}
		p.g.past[tp] = o
	}
	p.g.claimsMu.Unlock()
	for _, e := range p.ends {
		if e.msg.queued && p.q.Finish(e.msg.id) == nil {
			p.parked.Add(-1)
		}
	}
	clear(p.ends) // holds no message's topic past the pass
	p.ends = p.ends[:0]
}

func msgBytes(m *Message) int64 {
	n := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}
