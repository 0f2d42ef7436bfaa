package dispatch

import (
	"sync"
	"sync/atomic"
)

// budget bounds the messages fetched but not yet behind a commit frontier
// (Config.MaxInFlight). Partitions take credit before they read from Kafka
// and give it back as their frontier moves; a partition that finds no
// credit registers its wake channel and stops reading, which pauses its
// fetches.
type budget struct {
	max    int64
	resume int64 // waiters are woken once this much is free (hysteresis)
	used   atomic.Int64

	waiting atomic.Int32 // len(waiters), read without the lock on release
	mu      sync.Mutex
	waiters []waiter
}

// waiter is a paused partition: its wake channel, and the flag that keeps
// it from registering twice before it is woken.
type waiter struct {
	wake       chan<- struct{}
	registered *atomic.Bool
}

// tryAcquire takes up to n credits and returns how many it got.
func (b *budget) tryAcquire(n int64) int64 {
	for {
		u := b.used.Load()
		avail := b.max - u
		if avail <= 0 {
			return 0
		}
		g := min(n, avail)
		if b.used.CompareAndSwap(u, u+g) {
			return g
		}
	}
}

// wait registers wake to be signalled when credit is released and reports
// true, unless it is registered already (registered is set until the wake
// is sent: a partition woken for other reasons while paused would
// otherwise add itself again and again). After registering, the caller
// must try to acquire again, so no release is missed.
func (b *budget) wait(wake chan<- struct{}, registered *atomic.Bool) bool {
	if registered.Swap(true) {
		return false
	}
	b.mu.Lock()
	b.waiters = append(b.waiters, waiter{wake, registered})
	b.waiting.Store(int32(len(b.waiters)))
	b.mu.Unlock()
	return true
}

func (b *budget) release(n int64) {
	if n == 0 {
		return
	}
	used := b.used.Add(-n)
	if b.waiting.Load() == 0 || b.max-used < b.resume {
		return
	}
	b.mu.Lock()
	for i, w := range b.waiters {
		w.registered.Store(false)
		select {
		case w.wake <- struct{}{}:
		default:
		}
		b.waiters[i] = waiter{}
	}
	b.waiters = b.waiters[:0]
	b.waiting.Store(0)
	b.mu.Unlock()
}
