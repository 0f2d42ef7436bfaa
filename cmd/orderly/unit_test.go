package main

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/internal/loadgen"
)

func TestSplitList(t *testing.T) {
	short := func(s string) error {
		if len(s) > 2 {
			return errors.New("too long")
		}
		return nil
	}
	tests := []struct {
		in      string
		check   func(string) error
		want    []string
		wantErr string
	}{
		{"", nil, nil, ""},
		{"  ", nil, nil, ""},
		{"a", nil, []string{"a"}, ""},
		{"a, b ,c", nil, []string{"a", "b", "c"}, ""},
		{"a,,b", nil, nil, "empty entry"},
		{"a,", nil, nil, "empty entry"},
		{",a", nil, nil, "empty entry"},
		{"a, ,b", nil, nil, "empty entry"},
		{"ab,cd", short, []string{"ab", "cd"}, ""},
		{"ab,cde", short, nil, `"cde": too long`},
		{" cde ", short, nil, "too long"}, // the whole value: the flag's error names it already
	}
	for _, tt := range tests {
		got, err := splitList(tt.in, tt.check)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("splitList(%q): got %q, %v, want error %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("splitList(%q) = %q, %v, want %q, nil", tt.in, got, err, tt.want)
		}
	}
}

func TestCommittedOffsets(t *testing.T) {
	block := func(off int64, kerr sarama.KError) *sarama.OffsetFetchResponseBlock {
		return &sarama.OffsetFetchResponseBlock{Offset: off, LeaderEpoch: -1, Err: kerr}
	}
	tests := []struct {
		name    string
		blocks  map[int32]*sarama.OffsetFetchResponseBlock
		want    map[int32]int64
		wantErr error
	}{
		{"committed", map[int32]*sarama.OffsetFetchResponseBlock{0: block(5, 0), 1: block(7, 0)}, map[int32]int64{0: 5, 1: 7}, nil},
		{"no commit", map[int32]*sarama.OffsetFetchResponseBlock{0: block(5, 0), 1: block(-1, 0)}, map[int32]int64{0: 5}, nil},
		{"no block", map[int32]*sarama.OffsetFetchResponseBlock{0: block(5, 0)}, map[int32]int64{0: 5}, nil},
		// Sarama reports a failed partition with offset -1: the error must
		// not be mistaken for "no commit".
		{"error with offset -1", map[int32]*sarama.OffsetFetchResponseBlock{0: block(5, 0), 1: block(-1, sarama.ErrNotCoordinatorForConsumer)}, nil, sarama.ErrNotCoordinatorForConsumer},
		{"error with an offset", map[int32]*sarama.OffsetFetchResponseBlock{0: block(5, sarama.ErrUnknownTopicOrPartition)}, nil, sarama.ErrUnknownTopicOrPartition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := &sarama.OffsetFetchResponse{}
			for p, b := range tt.blocks {
				resp.AddBlock("t", p, b)
			}
			got, err := committedOffsets(resp, "g", "t", []int32{0, 1})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %v, %v, want an error wrapping %v", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !maps.Equal(got, tt.want) {
				t.Fatalf("got %v, %v, want %v, nil", got, err, tt.want)
			}
		})
	}
}

func TestStoreMax(t *testing.T) {
	tests := []struct {
		have, store, want int64
	}{
		{0, 5, 5},
		{5, 9, 9},
		{9, 5, 9}, // a call that ended earlier but stored later
		{7, 7, 7},
	}
	for _, tt := range tests {
		var a atomic.Int64
		a.Store(tt.have)
		storeMax(&a, tt.store)
		if got := a.Load(); got != tt.want {
			t.Errorf("storeMax(%d, %d): got %d, want %d", tt.have, tt.store, got, tt.want)
		}
	}
}

// TestBankFailuresRepeatable: whether a call fails depends on --seed and
// the partition, offset and attempt of its batch's first transfer, not on
// the order calls arrive in, so the same batches fail the same way in
// every run.
func TestBankFailuresRepeatable(t *testing.T) {
	const seed, rate, batches = 3, 0.3, 64
	p := newPlan(10, 2, 0, 0, seed)
	done := newFinished(map[int32]int64{0: 0, 1: 0, 2: 0, 3: 0})
	batch := func(i int) []Transfer {
		return []Transfer{{From: 0, To: 1, Cents: 1, Partition: int32(i % 4), Offset: int64(i)}}
	}
	type call struct {
		partition int32
		offset    int64
		attempt   int
	}
	// run retries every batch until it succeeds, in an order set by
	// interleave: each batch's calls back to back, or one call of each
	// pending batch per pass. It returns which calls failed.
	run := func(interleave bool) map[call]bool {
		b := newBank(p, done, 0, 0, rate, seed)
		failed := map[call]bool{}
		attempts := make([]int, batches)
		pending := batches
		for pending > 0 {
			for i := range batches {
				for attempts[i] >= 0 {
					attempts[i]++
					err := b.do(context.Background(), batch(i))
					failed[call{int32(i % 4), int64(i), attempts[i]}] = err != nil
					if err == nil {
						attempts[i] = -1
						pending--
					}
					if interleave {
						break
					}
				}
			}
		}
		return failed
	}
	inOrder, interleaved := run(false), run(true)
	if !maps.Equal(inOrder, interleaved) {
		t.Fatalf("failures depend on the call order:\nbatch by batch %v\ninterleaved    %v", inOrder, interleaved)
	}
	n := 0
	for c, failed := range inOrder {
		if want := loadgen.Fails(rate, seed, c.partition, c.offset, c.attempt); failed != want {
			t.Errorf("call %+v failed: got %v, want %v (loadgen.Fails)", c, failed, want)
		}
		if failed {
			n++
		}
	}
	if n == 0 {
		t.Errorf("no call failed at rate %v", rate)
	}
}

func TestFinished(t *testing.T) {
	f := newFinished(map[int32]int64{0: 10, 1: 0})
	for _, off := range []int64{10, 11, 13, 200} {
		f.mark(0, off)
	}
	f.mark(1, 0)
	f.mark(0, 5) // below the start: not this run's
	f.mark(7, 0) // not a partition at the start
	tests := []struct {
		start, upTo map[int32]int64
		want        int64
	}{
		{map[int32]int64{0: 10, 1: 0}, map[int32]int64{0: 12, 1: 1}, 0},
		{map[int32]int64{0: 10, 1: 0}, map[int32]int64{0: 14, 1: 1}, 1},     // 12
		{map[int32]int64{0: 10, 1: 0}, map[int32]int64{0: 10, 1: 3}, 2},     // 1:1, 1:2
		{map[int32]int64{0: 10}, map[int32]int64{0: 201}, 201 - 10 - 4},     // all but the four marked
		{map[int32]int64{0: 8}, map[int32]int64{0: 11}, 2},                  // 8, 9: below the start, never marked
		{map[int32]int64{}, map[int32]int64{7: 2}, 2},                       // an unknown partition counts in full
		{map[int32]int64{0: 10, 1: 0}, map[int32]int64{0: 10, 1: 0}, 0},     // nothing committed
		{map[int32]int64{0: 10, 1: 0}, map[int32]int64{0: 9 + 1, 1: 0}, 0},  // committed at the start
		{map[int32]int64{0: 10, 1: 0}, map[int32]int64{0: 14}, 1},           // only the partitions in upTo
		{map[int32]int64{0: 10, 1: 5}, map[int32]int64{0: 12, 1: 5 + 0}, 0}, // empty range
	}
	for _, tt := range tests {
		if got := f.missing(tt.start, tt.upTo); got != tt.want {
			t.Errorf("missing(%v, %v): got %d, want %d", tt.start, tt.upTo, got, tt.want)
		}
	}
}
