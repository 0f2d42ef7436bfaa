package group

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/orderly-go/orderly/internal/ledger"
)

// batchOf is a record batch at first, covering offsets first..last, with
// records at the given offsets (absolute).
func batchOf(first, last int64, records ...int64) *sarama.Records {
	b := &sarama.RecordBatch{FirstOffset: first, LastOffsetDelta: int32(last - first), Version: 2}
	for _, off := range records {
		b.Records = append(b.Records, &sarama.Record{OffsetDelta: off - first})
	}
	return &sarama.Records{RecordBatch: b}
}

// marker is a control batch at off (commit or abort) of producer pid.
func marker(off, pid int64, abort bool) *sarama.Records {
	typ := byte(1)
	if abort {
		typ = 0
	}
	b := &sarama.RecordBatch{FirstOffset: off, Version: 2, Control: true, IsTransactional: true, ProducerID: pid,
		Records: []*sarama.Record{{Key: []byte{0, 0, 0, typ}}}}
	return &sarama.Records{RecordBatch: b}
}

// txnBatch is a transactional data batch of producer pid.
func txnBatch(first, last, pid int64) *sarama.Records {
	r := batchOf(first, last, seqOffsets(first, last)...)
	r.RecordBatch.IsTransactional, r.RecordBatch.ProducerID = true, pid
	return r
}

func seqOffsets(first, last int64) []int64 {
	var out []int64
	for o := first; o <= last; o++ {
		out = append(out, o)
	}
	return out
}

// TestGapEndOf: the side fetch's scan passes control batches, aborted
// transactions (read-committed only) and batches with no record at or
// above the base, and stops at the first record a consumer delivers, a
// partial batch, or the high watermark.
func TestGapEndOf(t *testing.T) {
	const hw = 1000
	tests := []struct {
		name          string
		base          int64
		sets          []*sarama.Records
		aborted       []*sarama.AbortedTransaction
		readCommitted bool
		want          int64
	}{
		{"nothing fetched", 10, nil, nil, true, 10},
		{"a commit marker", 10, []*sarama.Records{marker(10, 7, false)}, nil, true, 11},
		{"two markers then data", 10, []*sarama.Records{marker(10, 7, false), marker(11, 8, false), batchOf(12, 13, 12, 13)}, nil, true, 12},
		{"data at the base", 10, []*sarama.Records{batchOf(10, 11, 10, 11)}, nil, true, 10},
		{"aborted transaction and its marker", 10, []*sarama.Records{txnBatch(10, 19, 7), marker(20, 7, true)},
			[]*sarama.AbortedTransaction{{ProducerID: 7, FirstOffset: 10}}, true, 21},
		{"aborted transaction read uncommitted: delivered", 10, []*sarama.Records{txnBatch(10, 19, 7), marker(20, 7, true)},
			[]*sarama.AbortedTransaction{{ProducerID: 7, FirstOffset: 10}}, false, 10},
		{"committed transaction after an aborted one of the same producer", 10,
			[]*sarama.Records{txnBatch(10, 14, 7), marker(15, 7, true), txnBatch(16, 20, 7), marker(21, 7, false)},
			[]*sarama.AbortedTransaction{{ProducerID: 7, FirstOffset: 10}}, true, 16},
		{"another producer's data inside an aborted transaction", 10,
			[]*sarama.Records{txnBatch(10, 14, 7), txnBatch(15, 19, 8), marker(20, 7, true)},
			[]*sarama.AbortedTransaction{{ProducerID: 7, FirstOffset: 10}}, true, 15},
		{"batch straddling the base, its records below it", 10, []*sarama.Records{batchOf(5, 12, 5, 8, 9), marker(13, 7, false)}, nil, true, 14},
		{"batch straddling the base with a record above it", 10, []*sarama.Records{batchOf(5, 12, 5, 11)}, nil, true, 10},
		{"compacted hole before a marker", 10, []*sarama.Records{marker(14, 7, false)}, nil, true, 15},
		{"partial trailing batch", 10, []*sarama.Records{marker(10, 7, false), {RecordBatch: &sarama.RecordBatch{FirstOffset: 11, PartialTrailingRecord: true}}}, nil, true, 11},
		{"legacy message set", 10, []*sarama.Records{{MsgSet: &sarama.MessageSet{}}}, nil, true, 10},
		{"capped at the high watermark", hw - 1, []*sarama.Records{marker(hw-1, 7, false), marker(hw, 7, false)}, nil, true, hw},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			block := &sarama.FetchResponseBlock{HighWaterMarkOffset: hw, RecordsSet: tt.sets, AbortedTransactions: tt.aborted}
			if got := gapEndOf(block, tt.base, tt.readCommitted); got != tt.want {
				t.Fatalf("gapEndOf from %d: got %d, want %d", tt.base, got, tt.want)
			}
		})
	}
}

// TestTransactions: a franz-go transactional producer commits, aborts and
// commits transactions on two partitions. Do gets every committed record,
// in key order, once, and no aborted one (DefaultSarama reads committed),
// and the committed offsets reach the high watermarks although every
// partition ends in a transaction marker, which no message follows. Then
// an aborted transaction alone: the frontier passes it and its marker too.
func TestTransactions(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	const topic, parts, per, keysPer = "txn", 2, 30, 3
	b := startBroker(t, topic, parts)
	prod := newKgo(t, b.Addrs(), kgo.TransactionalID("orderly-txn-test"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic(topic))
	counts := make([]uint32, parts*keysPer)
	records := func(p int32, committed bool) []*kgo.Record {
		var out []*kgo.Record
		for i := range per {
			key := uint32(int(p)*keysPer + i%keysPer)
			r := &kgo.Record{Partition: p, Key: fmt.Appendf(nil, "k%d", key)}
			if committed {
				r.Value = ledger.Encode(nil, key, counts[key], time.Time{}, nil)
				counts[key]++
			} else {
				r.Value = []byte("aborted")
			}
			out = append(out, r)
		}
		return out
	}
	both := func(committed bool) []*kgo.Record { return append(records(0, committed), records(1, committed)...) }
	transaction(t, prod, true, both(true)...)
	transaction(t, prod, false, both(false)...)
	transaction(t, prod, true, both(true)...)
	l := ledger.New(counts)

	var aborted atomic.Int64
	var mu sync.Mutex
	var bad []string
	cfg := fastConfig(t, b.Addrs(), topic, "txn")
	g := newGroup(t, cfg, func(_ context.Context, batch []*Message) error {
		for _, m := range batch {
			if string(m.Value) == "aborted" {
				aborted.Add(1)
				continue
			}
			key, seq, _, _, err := ledger.Decode(m.Value)
			if err != nil {
				mu.Lock()
				bad = append(bad, fmt.Sprintf("%d@%d: %v", m.Partition, m.Offset, err))
				mu.Unlock()
				continue
			}
			l.Record(key, seq, time.Time{})
		}
		return nil
	})
	stop := run(t, g)
	waitCaughtUp := func(what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !b.CaughtUp(cfg.GroupID, topic) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: committed %v, want the high watermarks %v (lag %d)", what, b.Committed(cfg.GroupID, topic), b.HighWatermarks(topic), g.Stats().Lag)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitCaughtUp("after commit, abort, commit")
	transaction(t, prod, false, both(false)...)
	waitCaughtUp("after an aborted transaction alone")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rep := l.Report()
	if rep.Lost != 0 || rep.Duplicates != 0 || rep.OrderViolations != 0 || len(bad) > 0 {
		t.Errorf("committed records: got lost %d, duplicates %d, order violations %d, undecodable %v; want all 0", rep.Lost, rep.Duplicates, rep.OrderViolations, bad)
	}
	if n := aborted.Load(); n != 0 {
		t.Errorf("aborted records handed to Do: got %d, want 0", n)
	}
	st := g.Stats()
	// Per partition: 3 commit markers and 2 abort markers, and the 30
	// records of the second aborted transaction (the first one lies
	// before committed records, which the consumer reads past itself).
	if want := int64(parts * (2 + 1 + per + 1)); st.ControlSkipped < int64(parts*2) || st.ControlSkipped > want {
		t.Errorf("Stats.ControlSkipped: got %d, want between %d and %d", st.ControlSkipped, parts*2, want)
	}
	// Stats.Committed counts messages: the offsets the frontier passed
	// as control or aborted are not among them.
	if st.Committed != int64(rep.Distinct) {
		t.Errorf("Stats.Committed: got %d, want %d (the committed records handled)", st.Committed, rep.Distinct)
	}
	t.Logf("%d committed records handled; %d aborted records produced, %d reached Do; committed offsets %v, high watermarks %v; %d offsets passed as control or aborted",
		rep.Distinct, 2*parts*per, aborted.Load(), b.Committed(cfg.GroupID, topic), b.HighWatermarks(topic), st.ControlSkipped)
}
