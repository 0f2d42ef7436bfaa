package group

import (
	"fmt"
	"sync"

	"github.com/IBM/sarama"
)

// committedFetches combines the committed-offset reads of many claims into
// few OffsetFetch requests. Every claim reads its partition's committed
// offset when it starts (its commit metadata) and when it ends (whether
// its final commit arrived), so at a rebalance or a shutdown hundreds of
// claims read at once. A caller that finds no request under way leads:
// it sends one request for itself and every partition asked for so far,
// answers each, and hands the lead to the first caller that arrived
// meanwhile, so no claim waits for more than the request under way and
// its own.
type committedFetches struct {
	mu      sync.Mutex
	running bool
	waiting []*fetchWait
}

type fetchWait struct {
	tp   topicPartition
	done chan struct{}
	lead bool // woken to lead, not answered
	off  int64
	meta string
	err  error
}

// fetchMany is fetchCommittedMany's signature.
type fetchMany func(map[string][]int32) (map[topicPartition]*sarama.OffsetFetchResponseBlock, map[topicPartition]error, error)

// fetch returns tp's committed offset and metadata, read by a request that
// began after the call.
func (f *committedFetches) fetch(tp topicPartition, many fetchMany) (int64, string, error) {
	w := &fetchWait{tp: tp, done: make(chan struct{})}
	f.mu.Lock()
	if f.running {
		f.waiting = append(f.waiting, w)
		f.mu.Unlock()
		<-w.done
		if !w.lead {
			return w.off, w.meta, w.err
		}
		w.lead, w.done = false, make(chan struct{}) // answered below, with the rest
		f.mu.Lock()
	}
	f.running = true
	batch := append([]*fetchWait{w}, f.waiting...)
	f.waiting = nil
	f.mu.Unlock()
	f.answer(batch, many)
	return w.off, w.meta, w.err
}

// answer sends one request for the partitions of batch, answers each, and
// then hands the lead on. Should the request panic, every caller of batch
// gets an error and the lead is handed on all the same.
func (f *committedFetches) answer(batch []*fetchWait, many fetchMany) {
	answered := 0
	defer f.handOn()
	defer func() {
		r := recover()
		for _, w := range batch[answered:] { // a panic, or runtime.Goexit
			w.err = fmt.Errorf("group: reading committed offsets ended early: %v", r)
			close(w.done)
		}
		if r != nil {
			panic(r)
		}
	}()
	parts := make(map[string][]int32)
	asked := make(map[topicPartition]bool, len(batch))
	for _, w := range batch {
		if !asked[w.tp] {
			asked[w.tp] = true
			parts[w.tp.topic] = append(parts[w.tp.topic], w.tp.part)
		}
	}
	blocks, failed, err := many(parts)
	for _, w := range batch {
		switch block := blocks[w.tp]; {
		case failed[w.tp] != nil:
			w.err = failed[w.tp] // its own error, not every partition's
		case err != nil:
			w.err = err
		case block == nil:
			w.err = errNoAnswer
		default:
			w.off, w.meta = block.Offset, block.Metadata
		}
		close(w.done)
		answered++
	}
}

// handOn wakes the first caller waiting to lead the next request, or ends
// the lead when none waits.
func (f *committedFetches) handOn() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.waiting) == 0 {
		f.running = false
		return
	}
	next := f.waiting[0]
	f.waiting = f.waiting[1:]
	next.lead = true
	close(next.done)
}
