package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// This file ports the databus/group design of seed 001 (Kratos
// databus/group) as faithfully as a benchmark allows, flaws included: one
// global head/last commit list across partitions under a mutex, a blocking
// per-message send to the worker chosen by Split%Num, Size/Ticker batches,
// Do with no error, and commits of the last done message per partition
// after walking the list from its head. The only changes: the blocking
// sends also watch the quit chan and Close waits for the goroutines, so a
// run ends cleanly; Commit is sarama's MarkMessage on the message's
// session.

// dbConfig is the seed's Config.
type dbConfig struct {
	Size   int           // merge size: most messages per Do
	Num    int           // merge goroutines
	Ticker time.Duration // a worker calls Do with what it has this often
	Chan   int           // capacity of each merge chan and of the done chan
}

// dbInput is what the databus client delivers (the seed's
// *databus.Message): a Kafka message that knows how to commit itself.
type dbInput struct {
	msg  *sarama.ConsumerMessage
	sess sarama.ConsumerGroupSession
}

// Commit marks the message for commit on its session.
func (d *dbInput) Commit() { d.sess.MarkMessage(d.msg, "") }

// dbMessage is the seed's message: a node of the global commit list.
type dbMessage struct {
	next   *dbMessage
	data   *dbInput
	object any
	done   bool
}

// dbGroup is the seed's Group.
type dbGroup struct {
	c          dbConfig
	head, last *dbMessage
	mu         sync.Mutex

	mc  []chan *dbMessage // merge chans
	dc  chan []*dbMessage // done chan
	qc  chan struct{}     // quit chan
	msg <-chan *dbInput

	New   func(msg *dbInput) (any, error)
	Split func(msg *dbInput, data any) int
	Do    func(msgs []any)

	pool      sync.Pool
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// newDBGroup applies the seed's defaults and starts the merge goroutines.
func newDBGroup(c dbConfig, msg <-chan *dbInput) *dbGroup {
	if c.Size <= 0 {
		c.Size = 1024
	}
	if c.Ticker <= 0 {
		c.Ticker = 5 * time.Second
	}
	if c.Num <= 0 {
		c.Num = 8
	}
	if c.Chan <= 0 {
		c.Chan = c.Size
	}
	g := &dbGroup{
		c:   c,
		msg: msg,
		mc:  make([]chan *dbMessage, c.Num),
		dc:  make(chan []*dbMessage, c.Chan),
		qc:  make(chan struct{}),
	}
	g.pool.New = func() any { return new(dbMessage) }
	for i := range g.mc {
		g.mc[i] = make(chan *dbMessage, c.Chan)
	}
	return g
}

// Start runs consumeproc, the Num mergeprocs and commitproc. New, Split and
// Do must be set.
func (g *dbGroup) Start() {
	for _, mc := range g.mc {
		g.wg.Go(func() { g.mergeproc(mc) })
	}
	g.wg.Go(g.consumeproc)
	g.wg.Go(g.commitproc)
}

// Close stops every goroutine; batches not yet done are dropped (as in the
// seed). Wait waits for them to return.
func (g *dbGroup) Close() { g.closeOnce.Do(func() { close(g.qc) }) }

// Wait returns when every goroutine Start started has returned.
func (g *dbGroup) Wait() { g.wg.Wait() }

// settled reports whether the commit list is empty: every message
// consumeproc took is done and committed.
func (g *dbGroup) settled() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.head == nil
}

func (g *dbGroup) message() *dbMessage { return g.pool.Get().(*dbMessage) }

func (g *dbGroup) freeMessage(m *dbMessage) {
	*m = dbMessage{}
	g.pool.Put(m)
}

// consumeproc links each message at the end of the commit list and hands
// it to worker Split%Num, blocking while that worker's chan is full.
func (g *dbGroup) consumeproc() {
	for {
		var in *dbInput
		select {
		case <-g.qc:
			return
		case msg, ok := <-g.msg:
			if !ok {
				g.Close()
				return
			}
			in = msg
		}
		m := g.message()
		m.data = in
		var err error
		if m.object, err = g.New(in); err != nil {
			g.freeMessage(m)
			continue
		}
		g.mu.Lock()
		if g.head == nil {
			g.head = m
			g.last = m
		} else {
			g.last.next = m
			g.last = m
		}
		g.mu.Unlock()
		select {
		case g.mc[g.Split(m.data, m.object)%g.c.Num] <- m:
		case <-g.qc:
			return
		}
	}
}

// mergeproc batches its worker's messages and calls Do when the batch
// reaches Size or the ticker fires, then sends the batch to commitproc.
func (g *dbGroup) mergeproc(mc <-chan *dbMessage) {
	ticker := time.NewTicker(g.c.Ticker)
	defer ticker.Stop()
	msgs := make([]any, 0, g.c.Size)
	marks := make([]*dbMessage, 0, g.c.Size)
	for {
		select {
		case <-g.qc:
			return
		case msg := <-mc:
			msgs = append(msgs, msg.object)
			marks = append(marks, msg)
			if len(msgs) < g.c.Size {
				continue
			}
		case <-ticker.C:
		}
		if len(msgs) > 0 {
			g.Do(msgs)
			msgs = make([]any, 0, g.c.Size)
		}
		if len(marks) > 0 {
			select {
			case g.dc <- marks:
			case <-g.qc:
				return
			}
			marks = make([]*dbMessage, 0, g.c.Size)
		}
	}
}

// commitproc marks finished batches done, pops the done prefix of the
// global list and commits the last popped message of each partition.
func (g *dbGroup) commitproc() {
	commits := make(map[int32]*dbInput)
	for {
		select {
		case <-g.qc:
			return
		case done := <-g.dc:
			for _, d := range done {
				d.done = true
			}
			g.mu.Lock()
			for g.head != nil && g.head.done {
				cur := g.head
				commits[cur.data.msg.Partition] = cur.data
				g.head = cur.next
				g.freeMessage(cur)
			}
			g.mu.Unlock()
			for k, m := range commits {
				m.Commit()
				delete(commits, k)
			}
		}
	}
}

// Databus is the seed-001 design as a contender. Its input is one merged
// channel fed by the ConsumeClaim goroutines of a sarama consumer group
// (the seed consumes one databus channel). Split is a hash of the key (the
// partition for an empty key); Do runs the simulated work with inline retry
// (the design's Do cannot fail). The design has no "never wait": a Ticker
// <= 0 in the spec becomes DatabusTicker when Size > 1, and the seed's
// default (5s) when Size = 1, where every message fills a batch and the
// ticker would only cost Num wake-ups per tick.
type Databus struct {
	observe func(msgs []any) // tests: sees every Do batch first
}

// DatabusTicker is the databus Ticker used when the spec asks for none.
const DatabusTicker = 10 * time.Millisecond

// Name implements Contender.
func (Databus) Name() string { return "databus" }

// Run implements Contender.
func (d Databus) Run(ctx context.Context, spec RunSpec) (Result, error) {
	t := newTracker(spec.Expected, nil)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	in := make(chan *dbInput, max(spec.Chan, 1))
	ticker := spec.Ticker
	if ticker <= 0 && spec.Size > 1 {
		ticker = DatabusTicker
	}
	g := newDBGroup(dbConfig{Size: spec.Size, Num: spec.Num, Ticker: ticker, Chan: spec.Chan}, in)
	g.New = func(msg *dbInput) (any, error) { return msg, nil }
	g.Split = func(msg *dbInput, _ any) int { return keySplit(msg.msg.Key, msg.msg.Partition) }
	g.Do = func(msgs []any) {
		if d.observe != nil {
			d.observe(msgs)
		}
		first := msgs[0].(*dbInput).msg
		spec.Work.doInline(runCtx, t, first.Partition, first.Offset, len(msgs))
	}
	g.Start()

	// Once everything is handled, let commitproc catch up so the final
	// commits include every message, then stop the consumer group.
	consumeCtx, stopConsume := context.WithCancel(runCtx)
	defer stopConsume()
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-t.done:
		case <-runCtx.Done():
			return
		}
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for !g.settled() {
			select {
			case <-tick.C:
			case <-runCtx.Done():
				return
			}
		}
		stopConsume()
	})
	err := consume(consumeCtx, spec, &dbFeeder{in: in})
	cancel()
	g.Close()
	g.Wait()
	wg.Wait()
	r, err := finish(ctx, spec, t, err)
	if err != nil {
		return r, fmt.Errorf("databus: %w", err)
	}
	return r, nil
}

// dbFeeder is the sarama handler that merges every claim into the
// databus input channel.
type dbFeeder struct{ in chan<- *dbInput }

func (*dbFeeder) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (*dbFeeder) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (f *dbFeeder) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	done := sess.Context().Done()
	for m := range claim.Messages() {
		select {
		case f.in <- &dbInput{msg: m, sess: sess}:
		case <-done:
			return nil
		}
	}
	return nil
}

// keySplit is the databus Split: a hash of the key, or the partition when
// the key is empty. It is never negative.
func keySplit(key []byte, partition int32) int {
	if len(key) == 0 {
		return int(partition)
	}
	h := uint32(2166136261) // FNV-1a
	for _, c := range key {
		h = (h ^ uint32(c)) * 16777619
	}
	return int(h)
}
