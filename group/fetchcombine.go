package group

import (
	"errors"

	"github.com/IBM/sarama"
)

// committedFetches combines the committed-offset reads of many claims into
// few OffsetFetch requests (coalesced). Every claim reads its partition's
// committed offset when it starts (its commit metadata) and when it ends
// (whether its final commit arrived), so at a rebalance or a shutdown
// hundreds of claims read at once.
type committedFetches struct{ c coalesced[*fetchWait] }

type fetchWait struct {
	tp   topicPartition
	off  int64
	meta string
	err  error
}

// fetchMany is fetchCommittedMany's signature.
type fetchMany func(map[string][]int32) (map[topicPartition]*sarama.OffsetFetchResponseBlock, map[topicPartition]error, error)

// errFetchEnded: the request that was to answer a read panicked.
var errFetchEnded = errors.New("group: reading committed offsets ended early")

// fetch returns tp's committed offset and metadata, read by a request that
// began after the call.
func (f *committedFetches) fetch(tp topicPartition, many fetchMany) (int64, string, error) {
	w := &fetchWait{tp: tp}
	if !f.c.do(w, func(batch []*fetchWait) { answer(batch, many) }) {
		return 0, "", errFetchEnded
	}
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
		case failed[w.tp] != nil:
			w.err = failed[w.tp] // its own error, not every partition's
		case err != nil:
			w.err = err
		case block == nil:
			w.err = errNoAnswer
		default:
			w.off, w.meta = block.Offset, block.Metadata
		}
	}
}
