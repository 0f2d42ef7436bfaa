package group

import (
	"sync"

	"github.com/IBM/sarama"
)

// committedFetches combines the committed-offset reads of many claims into
// few OffsetFetch requests: every claim reads its partition's committed
// offset when it starts (its commit metadata) and when it ends (whether
// its final commit arrived), so a rebalance or a shutdown of a member with
// hundreds of claims sent hundreds of one-partition requests at once. The
// first caller to find no request under way sends one for every partition
// asked for meanwhile and answers each, and goes on while more arrived.
type committedFetches struct {
	mu      sync.Mutex
	running bool
	waiting []*fetchWait
}

type fetchWait struct {
	tp   topicPartition
	done chan struct{}
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
	f.waiting = append(f.waiting, w)
	if f.running {
		f.mu.Unlock()
		<-w.done
		return w.off, w.meta, w.err
	}
	f.running = true
	for len(f.waiting) > 0 {
		batch := f.waiting
		f.waiting = nil
		f.mu.Unlock()
		answer(batch, many)
		f.mu.Lock()
	}
	f.running = false
	f.mu.Unlock()
	return w.off, w.meta, w.err
}

// answer sends one request for the partitions of batch and answers each.
func answer(batch []*fetchWait, many fetchMany) {
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
		case err != nil:
			w.err = err
		case block == nil:
			w.err = failed[w.tp]
			if w.err == nil {
				w.err = errNoAnswer
			}
		default:
			w.off, w.meta = block.Offset, block.Metadata
		}
		close(w.done)
	}
}
