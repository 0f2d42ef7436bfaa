package group

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// TestCommittedFetchesCombine: callers reading at once share requests,
// each gets its own partition's answer or error, and a request that
// panics fails its callers and leaves the next ones served.
func TestCommittedFetchesCombine(t *testing.T) {
	var f committedFetches
	var requests atomic.Int64
	var panicking atomic.Bool
	many := func(parts map[string][]int32) (map[topicPartition]*sarama.OffsetFetchResponseBlock, map[topicPartition]error, error) {
		requests.Add(1)
		if panicking.Load() {
			panic("broken")
		}
		time.Sleep(5 * time.Millisecond) // a round trip: callers pile up meanwhile
		blocks := map[topicPartition]*sarama.OffsetFetchResponseBlock{}
		failed := map[topicPartition]error{}
		for topic, ps := range parts {
			for _, p := range ps {
				tp := topicPartition{topic, p}
				if p%10 == 3 {
					failed[tp] = errors.New("partition 3 failed")
					continue
				}
				blocks[tp] = &sarama.OffsetFetchResponseBlock{Offset: int64(p) * 100, Metadata: topic}
			}
		}
		return blocks, failed, nil
	}
	const callers = 64
	var wg sync.WaitGroup
	for p := range int32(callers) {
		wg.Go(func() {
			off, meta, err := f.fetch(topicPartition{"t", p}, many)
			switch {
			case p%10 == 3:
				if err == nil || !strings.Contains(err.Error(), "partition 3 failed") {
					t.Errorf("partition %d: got %d, %v, want its own error", p, off, err)
				}
			case err != nil || off != int64(p)*100 || meta != "t":
				t.Errorf("partition %d: got %d %q %v, want %d \"t\"", p, off, meta, err, p*100)
			}
		})
	}
	wg.Wait()
	if got := requests.Load(); got >= callers/2 {
		t.Errorf("%d callers at once: got %d requests, want them shared (fewer than %d)", callers, got, callers/2)
	}

	panicking.Store(true)
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Error("a panicking request: got no panic in the leading caller")
			}
		}()
		_, _, _ = f.fetch(topicPartition{"t", 1}, many)
	}()
	panicking.Store(false)
	if off, _, err := f.fetch(topicPartition{"t", 2}, many); err != nil || off != 200 {
		t.Fatalf("after a panicking request: got %d, %v, want 200", off, err)
	}
}
