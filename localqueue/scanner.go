package localqueue

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Defaults for zero ScannerOptions fields (nsqd's QueueScan* defaults).
const (
	DefaultScanInterval   = 100 * time.Millisecond
	DefaultSelectionCount = 20
	DefaultDirtyPercent   = 0.25
	DefaultWorkerPoolMax  = 4
)

// ScannerOptions configures a Scanner. Zero fields take the defaults.
type ScannerOptions struct {
	// ScanInterval is how often the scanner samples queues. It bounds how
	// late a timeout or a deferred message is handled. Default 100ms.
	ScanInterval time.Duration
	// SelectionCount is how many queues one round samples. Default 20.
	SelectionCount int
	// DirtyPercent is the fraction (0 to 1, as nsqd's
	// QueueScanDirtyPercent) of a sample that must have had due messages
	// for the scanner to sample again at once instead of waiting for the
	// next interval. Default 0.25.
	DirtyPercent float64
	// WorkerPoolMax caps the workers; the pool is sized to a quarter of
	// the registered queues, at least 1. Default 4.
	WorkerPoolMax int
	// Logger receives lifecycle events. Default zap.NewNop().
	Logger *zap.Logger

	// afterIdleScan, when set (tests), runs on the worker between a scan
	// that found q idle and deactivate.
	afterIdleScan func(q *Queue)
}

func (o ScannerOptions) withDefaults() ScannerOptions {
	if o.ScanInterval == 0 {
		o.ScanInterval = DefaultScanInterval
	}
	if o.SelectionCount == 0 {
		o.SelectionCount = DefaultSelectionCount
	}
	if o.DirtyPercent == 0 {
		o.DirtyPercent = DefaultDirtyPercent
	}
	if o.WorkerPoolMax == 0 {
		o.WorkerPoolMax = DefaultWorkerPoolMax
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o
}

func (o ScannerOptions) validate() error {
	switch {
	case o.ScanInterval < 0:
		return optionError("ScanInterval", "is %v: want a positive duration", o.ScanInterval)
	case o.SelectionCount < 0:
		return optionError("SelectionCount", "is %d: want 1 or more", o.SelectionCount)
	case !(o.DirtyPercent > 0 && o.DirtyPercent <= 1):
		return optionError("DirtyPercent", "is %v: want a fraction in (0, 1]", o.DirtyPercent)
	case o.WorkerPoolMax < 0:
		return optionError("WorkerPoolMax", "is %d: want 1 or more", o.WorkerPoolMax)
	}
	return nil
}

// Scanner is nsqd's queueScanLoop shared by many queues: every
// ScanInterval it samples SelectionCount queues at random, has its workers
// time out their due in-flight messages and release their due deferred
// ones, and samples again at once while more than DirtyPercent of the
// sample had work. The worker pool is resized (nsqd's resizePool) to a
// quarter of the registered queues, at least 1 and at most WorkerPoolMax.
//
// Unlike nsqd it samples only queues that have something in flight or
// deferred: a queue joins that active set when it gets its first timer and
// leaves it when a worker finds it empty. Idle queues therefore cost
// nothing, busy ones are not diluted by idle ones, and with no active queue
// the loop sleeps without a ticker.
type Scanner struct {
	opts     ScannerOptions
	log      *zap.Logger
	kick     chan struct{} // cap 1: registrations changed or first queue became active
	exitChan chan struct{}
	wg       sync.WaitGroup

	activeMu   sync.Mutex
	active     []*Queue     // guarded by activeMu; Queue.scanIndex is the position
	registered int          // guarded by activeMu
	closed     bool         // guarded by activeMu
	workers    atomic.Int32 // pool size, for tests and observability

	// owned by loop
	workCh     chan *Queue
	respCh     chan bool
	stopWorker chan struct{}
	poolSize   int
	rng        *rand.Rand
	picked     []int
	sample     []*Queue
}

// NewScanner starts a scanner. Close it after the queues that use it.
func NewScanner(opts ScannerOptions) (*Scanner, error) {
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	s := &Scanner{
		opts:       o,
		log:        o.Logger,
		kick:       make(chan struct{}, 1),
		exitChan:   make(chan struct{}),
		workCh:     make(chan *Queue, o.SelectionCount),
		respCh:     make(chan bool, o.SelectionCount),
		stopWorker: make(chan struct{}),
		rng:        rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}
	s.wg.Add(1)
	go s.loop()
	return s, nil
}

// Close stops the scanner and waits for its goroutines. Queues still
// registered are no longer scanned. A second Close returns ErrClosed.
func (s *Scanner) Close() error {
	s.activeMu.Lock()
	if s.closed {
		s.activeMu.Unlock()
		return ErrClosed
	}
	s.closed = true
	s.activeMu.Unlock()
	close(s.exitChan)
	s.wg.Wait()
	return nil
}

func (s *Scanner) register(q *Queue) error {
	s.activeMu.Lock()
	defer s.activeMu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.registered++
	q.scanRegistered = true
	signal(s.kick)
	return nil
}

func (s *Scanner) unregister(q *Queue) {
	s.activeMu.Lock()
	defer s.activeMu.Unlock()
	if !q.scanRegistered {
		return
	}
	s.removeLocked(q)
	s.registered--
	q.scanRegistered = false
	signal(s.kick)
}

// activate adds q to the active set. Queues call it after every push to
// their in-flight or deferred heap; it is one atomic load when q is active.
func (s *Scanner) activate(q *Queue) {
	if q.scanActive.Load() {
		return
	}
	s.activeMu.Lock()
	if !q.scanRegistered || q.scanActive.Load() {
		s.activeMu.Unlock()
		return
	}
	q.scanIndex = len(s.active)
	s.active = append(s.active, q)
	q.scanActive.Store(true)
	first := len(s.active) == 1
	s.activeMu.Unlock()
	if first {
		signal(s.kick)
	}
}

// deactivate removes q, which a worker found without timers, from the
// active set. A push that raced with that finding either saw scanActive
// still set (and so happened before the Store below, which the re-check
// then observes) or sees it cleared and activates q itself.
func (s *Scanner) deactivate(q *Queue) {
	s.activeMu.Lock()
	s.removeLocked(q)
	s.activeMu.Unlock()
	if q.hasTimersOpen() {
		s.activate(q)
	}
}

func (s *Scanner) removeLocked(q *Queue) {
	if !q.scanActive.Load() {
		return
	}
	last := len(s.active) - 1
	moved := s.active[last]
	s.active[q.scanIndex] = moved
	moved.scanIndex = q.scanIndex
	s.active[last] = nil
	s.active = s.active[:last]
	q.scanActive.Store(false)
}

// counts reports the sizes of the active set and of the registered queues.
func (s *Scanner) counts() (active, registered int) {
	s.activeMu.Lock()
	defer s.activeMu.Unlock()
	return len(s.active), s.registered
}

func (s *Scanner) loop() {
	defer s.wg.Done()
	ticker := time.NewTicker(s.opts.ScanInterval)
	defer ticker.Stop()
	s.resize()
	for {
		var tick <-chan time.Time // nil while no queue is active: sleep
		if active, _ := s.counts(); active > 0 {
			tick = ticker.C
		}
		select {
		case <-tick:
			s.scanRounds()
		case <-s.kick:
			s.resize()
		case <-s.exitChan:
			close(s.stopWorker)
			s.log.Debug("queue scanner stopped")
			return
		}
	}
}

// scanRounds samples, processes, and samples again while the sample was
// dirty enough (Redis' probabilistic expiry, as nsqd's queueScanLoop).
func (s *Scanner) scanRounds() {
	for {
		sample := s.pick()
		n := len(sample)
		if n == 0 {
			return
		}
		for _, q := range sample {
			s.workCh <- q // cap SelectionCount: never blocks
		}
		dirty := 0
		for range n {
			if <-s.respCh {
				dirty++
			}
		}
		clear(sample)
		if float64(dirty) <= s.opts.DirtyPercent*float64(n) {
			return
		}
		select {
		case <-s.exitChan:
			return
		default:
		}
	}
}

// pick samples up to SelectionCount distinct active queues (Floyd's
// algorithm).
func (s *Scanner) pick() []*Queue {
	s.activeMu.Lock()
	defer s.activeMu.Unlock()
	n := len(s.active)
	k := min(s.opts.SelectionCount, n)
	s.sample = s.sample[:0]
	if k == n {
		s.sample = append(s.sample, s.active...)
		return s.sample
	}
	s.picked = s.picked[:0]
	for j := n - k; j < n; j++ {
		t := s.rng.IntN(j + 1)
		for _, p := range s.picked {
			if p == t {
				t = j
				break
			}
		}
		s.picked = append(s.picked, t)
		s.sample = append(s.sample, s.active[t])
	}
	return s.sample
}

// resize grows or shrinks the worker pool to a quarter of the registered
// queues, within [1, WorkerPoolMax].
func (s *Scanner) resize() {
	_, registered := s.counts()
	ideal := min(max(registered/4, 1), s.opts.WorkerPoolMax)
	for s.poolSize < ideal {
		s.wg.Add(1)
		go s.worker()
		s.poolSize++
	}
	for s.poolSize > ideal {
		s.stopWorker <- struct{}{}
		s.poolSize--
	}
	s.workers.Store(int32(s.poolSize))
}

func (s *Scanner) worker() {
	defer s.wg.Done()
	for {
		select {
		case q := <-s.workCh:
			dirty, idle := q.scan()
			if idle {
				if s.opts.afterIdleScan != nil {
					s.opts.afterIdleScan(q)
				}
				s.deactivate(q)
			}
			s.respCh <- dirty
		case <-s.stopWorker:
			return
		}
	}
}
