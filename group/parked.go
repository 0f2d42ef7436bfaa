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

	mu    sync.Mutex
	queue []parkJob[T]
	kick  chan struct{}
	ids   map[*dispatch.Item[Message, T]]localqueue.ID // side items: their queue message
	seq   int64                                        // side partition's offsets

	parked      atomic.Int64 // messages parked now
	writeErrors atomic.Int64
	errLog      rateLimit
}

type parkJob[T any] struct {
	it    *dispatch.Item[Message, T]
	delay time.Duration
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
	p := &parking[T]{g: g, q: q, kick: make(chan struct{}, 1), ids: make(map[*dispatch.Item[Message, T]]localqueue.ID)}
	st := q.Stats()
	p.parked.Store(st.Depth + int64(st.Deferred) + int64(st.InFlight)) // what a previous run left
	return p, nil
}

// add parks it, to run again after delay.
func (p *parking[T]) add(it *dispatch.Item[Message, T], delay time.Duration) {
	p.mu.Lock()
	p.queue = append(p.queue, parkJob[T]{it, delay})
	p.mu.Unlock()
	notify(p.kick)
}

func (p *parking[T]) start(ctx context.Context, wg *sync.WaitGroup) {
	p.side = p.g.sched.NewSidePartition(p.g.cfg.Chan)
	wg.Go(func() { p.park(ctx) })
	wg.Go(func() { p.redeliver(ctx) })
}

func (p *parking[T]) close() error { return p.q.Close() }

// park writes the queued jobs, syncs once for all of them, and only then
// lets their items finish.
func (p *parking[T]) park(ctx context.Context) {
	var jobs []parkJob[T]
	for {
		select {
		case <-p.kick:
		case <-ctx.Done():
			return
		}
		p.mu.Lock()
		jobs, p.queue = p.queue, jobs[:0]
		p.mu.Unlock()
		wait := p.g.cfg.Retry.Backoff
		for len(jobs) > 0 {
			err := p.write(jobs)
			if err == nil {
				break
			}
			p.writeErrors.Add(1)
			p.errLog.warn(p.g.log, "parking messages failed; retrying", zap.String("path", p.g.cfg.DataPath),
				zap.Int("messages", len(jobs)), zap.Duration("backoff", wait), zap.Error(err))
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return // the items stay held: nothing is committed past them
			}
			wait = min(2*wait, p.g.cfg.Retry.MaxBackoff)
		}
		for _, j := range jobs {
			p.g.sched.Unhold(j.it, true)
		}
		clear(jobs)
	}
}

// write parks every job durably. A side item (a parked message that failed
// again) is requeued in place; the others are put, deferred. A job whose
// write failed is retried with the rest (a duplicate park is at-least-once).
func (p *parking[T]) write(jobs []parkJob[T]) error {
	var errs []error
	for _, j := range jobs {
		p.mu.Lock()
		id, side := p.ids[j.it]
		if side {
			delete(p.ids, j.it) // it finishes without finishing its queue message
		}
		p.mu.Unlock()
		var err error
		if side {
			err = p.q.Requeue(id, j.delay)
		} else if _, err = p.q.PutDeferred(encodeParked(nil, &j.it.Msg, j.it.Attempt, j.it.FirstFailure), j.delay); err == nil {
			p.parked.Add(1)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s/%d offset %d: %w", j.it.Msg.Topic, j.it.Msg.Partition, j.it.Msg.Offset, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return p.q.Sync()
}

// redeliver hands parked messages back to the workers as they come due, at
// most a channel's worth at a time, and finishes their queue messages as
// they finish.
func (p *parking[T]) redeliver(ctx context.Context) {
	got := make(chan *localqueue.Message)
	var getter sync.WaitGroup
	defer getter.Wait()
	want := make(chan struct{}, 1)
	getter.Go(func() {
		for {
			select {
			case <-want:
			case <-ctx.Done():
				return
			}
			m, err := p.q.Get(ctx)
			if err != nil {
				return
			}
			select {
			case got <- m:
			case <-ctx.Done():
				return
			}
		}
	})
	asking := false
	for {
		if !asking && p.side.Unfinished() < int64(p.g.cfg.Chan) {
			asking = true
			want <- struct{}{}
		}
		select {
		case m := <-got:
			asking = false
			p.intake(m)
		case <-p.side.Wake():
			p.side.AdvanceFunc(p.finished)
		case <-ctx.Done():
			return
		}
	}
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
		it.Attempt, it.FirstFailure = attempt, first
		p.track(it, m.ID)
		p.g.fail.dead.add(it, func() { p.side.Complete(it) }, reasonPoison, attempt-1, err)
		return
	}
	it.Val, it.Lane = v, uint64(p.seq+1) // a lane of its own, as Unordered has
	if err := p.side.Add(it, p.nextSeq(), msgBytes(&it.Msg)); err != nil {
		return
	}
	it.Attempt, it.FirstFailure = attempt, first // Add starts them over
	it.Msg.Attempt = attempt
	p.track(it, m.ID)
	p.side.Flush()
}

func (p *parking[T]) nextSeq() int64 { p.seq++; return p.seq }

func (p *parking[T]) track(it *dispatch.Item[Message, T], id localqueue.ID) {
	p.mu.Lock()
	p.ids[it] = id
	p.mu.Unlock()
}

// finished finishes the queue message of a side item that finished (it
// succeeded, or its dead letter was written).
func (p *parking[T]) finished(it *dispatch.Item[Message, T]) {
	p.mu.Lock()
	id, ok := p.ids[it]
	delete(p.ids, it)
	p.mu.Unlock()
	if ok && p.q.Finish(id) == nil {
		p.parked.Add(-1)
	}
}

func msgBytes(m *Message) int64 {
	n := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}
