package group

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/orderly-go/orderly/commit"
	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/ledger"
)

// TestOracleCatches: the oracle's checks fail on what they are there to
// catch, fed by hand: a record never handled below the commit, two keys'
// completions out of order, a commit past unfinished work, a commit going
// back within a generation, a zombie commit at the newest generation and
// one the broker would refuse, a duplicate with no unclean end to explain
// it and one within the bound.
func TestOracleCatches(t *testing.T) {
	// Key 0: offsets 0..3 of partition 0 (seqs 0..3); key 1: offsets 0..1
	// of partition 1.
	o := newOracle(t, "self", "t", []uint32{4, 2})
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	val := func(key, seq uint32) []byte { return ledger.Encode(nil, key, seq, time.Time{}, nil) }
	o.done("A", 1, 0, 0, 1, val(0, 0), at(10))
	o.done("A", 1, 0, 2, 1, val(0, 2), at(20)) // before seq 1: an order violation
	o.done("A", 1, 0, 1, 1, val(0, 1), at(30))
	// offset 3 of partition 0 is never handled
	o.done("A", 1, 1, 0, 1, val(1, 0), at(10))
	o.done("B", 2, 1, 0, 1, val(1, 0), at(50)) // a duplicate, A ended cleanly: unjustified
	o.done("B", 2, 1, 1, 1, val(1, 1), at(60))
	o.done("C", 2, 1, 1, 1, val(1, 1), at(70)) // a duplicate within the bound (C ends uncleanly below)
	o.uncleanEnd("C", map[int32]broker.Commit{1: {Offset: 1}})
	commitReq := func(member string, gen int32, p int32, off int64) {
		req := kmsg.NewPtrOffsetCommitRequest()
		req.MemberID, req.Generation = member, gen
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = "t"
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = p, off
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		o.observe(req)
	}
	time.Sleep(100 * time.Millisecond) // the requests are stamped now, after every completion above
	commitReq("A", 1, 0, 3)            // fine: 0..2 finished
	commitReq("A", 1, 0, 4)            // past offset 3, never finished
	commitReq("A", 1, 0, 2)            // backwards in generation 1
	commitReq("B", 2, 1, 2)            // B owns partition 1 in generation 2
	commitReq("A", 1, 1, 1)            // A, generation 1 < newest: a refused zombie
	commitReq("C", 2, 1, 2)            // C in generation 2 after B: a zombie at the newest generation
	v := o.verdict(map[int32][]int64{0: {0, 1, 2, 3}, 1: {0, 1}}, map[int32]int64{0: 4, 1: 2})
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"lost", v.Lost, 1},
		{"order violations", v.OrderViolations, 1},
		{"commits past unfinished work", v.PastUnfinished, 1},
		{"commits backwards", v.Backwards, 1},
		{"zombie commits refused", v.ZombiesRefused, 1},
		{"zombie commits at the newest generation", v.ZombiesAtNewest, 1},
		{"duplicates", v.Duplicates, 2},
		{"duplicates outside the bound", v.Unjustified, 1},
		{"duplicate bound", v.DupBound, 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %d, want %d", c.name, c.got, c.want)
		}
	}
}

// TestOracleSampledCommits: the sampled broker commits of a partition are
// reported when the committed offset goes back or a later commit no longer
// covers a finished offset an earlier one listed, and not when a later
// commit covers it by its offset or its own ranges.
func TestOracleSampledCommits(t *testing.T) {
	meta := func(base int64, ranges ...commit.Range) string {
		m, _ := commit.EncodeMeta(base, ranges, 4096)
		return m
	}
	tests := []struct {
		name    string
		samples []broker.Commit
		want    string // in a problem; "" for none
	}{
		{"offset back", []broker.Commit{{Offset: 5}, {Offset: 4}}, "went back from 5 to 4"},
		{"ranges dropped", []broker.Commit{{Offset: 10, Metadata: meta(10, commit.Range{Start: 12, End: 14})}, {Offset: 11}},
			"(offset 11) no longer covers 2 offsets (the first 12)"},
		{"range partly dropped", []broker.Commit{{Offset: 10, Metadata: meta(10, commit.Range{Start: 12, End: 14})}, {Offset: 13}},
			"(offset 13) no longer covers 1 offsets (the first 13)"},
		{"passed on", []broker.Commit{{Offset: 10, Metadata: meta(10, commit.Range{Start: 12, End: 14})},
			{Offset: 11, Metadata: meta(11, commit.Range{Start: 12, End: 15})}, {Offset: 15}}, ""},
		{"metadata for another offset covers nothing", []broker.Commit{{Offset: 10, Metadata: meta(10, commit.Range{Start: 12, End: 14})},
			{Offset: 11, Metadata: meta(10, commit.Range{Start: 12, End: 14})}}, "no longer covers 2 offsets"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newOracle(t, "self", "t", []uint32{1})
			for _, c := range tt.samples {
				o.sample(map[int32]broker.Commit{0: c}, time.Now())
			}
			o.mu.Lock()
			defer o.mu.Unlock()
			switch {
			case tt.want == "" && len(o.problems) > 0:
				t.Errorf("got problems %q, want none", o.problems)
			case tt.want != "" && (len(o.problems) != 1 || !strings.Contains(o.problems[0], tt.want)):
				t.Errorf("got problems %q, want one with %q", o.problems, tt.want)
			}
		})
	}
}

// TestOracleBounds: an unclean end limited to a generation (uncleanEndGen,
// a member the broker died under) excuses repeats of that generation's
// completions only; mayRepeat excuses as many repeats as it was called,
// no more; and feedLogs gives completions from several process logs to
// the lane order check in time order, whatever order the logs are read in.
func TestOracleBounds(t *testing.T) {
	val := func(key, seq uint32) []byte { return ledger.Encode(nil, key, seq, time.Time{}, nil) }
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name                string
		feed                func(o *oracle)
		dups, unjust, bound int
		order               int
	}{
		{"generation limit", func(o *oracle) {
			o.done("A", 1, 0, 0, 1, val(0, 0), at(1))
			o.done("A", 1, 0, 1, 1, val(0, 1), at(2))
			o.done("A", 1, 0, 1, 1, val(0, 1), at(3)) // gen 1: excused
			o.done("A", 2, 0, 2, 1, val(0, 2), at(4))
			o.done("A", 2, 0, 2, 1, val(0, 2), at(5)) // gen 2: not excused by an end at gen 1
			o.uncleanEndGen("A", 1, map[int32]broker.Commit{0: {Offset: 1}})
		}, 2, 1, 2, 0},
		{"mayRepeat", func(o *oracle) {
			for range 3 {
				o.done("A", 1, 0, 0, 1, val(0, 0), at(1))
			}
			o.done("A", 1, 0, 1, 1, val(0, 1), at(2))
			o.done("A", 1, 0, 1, 1, val(0, 1), at(3))
			o.mayRepeat(0, 0) // once: 2 repeats of offset 0 are not both excused
			o.mayRepeat(0, 1)
		}, 3, 2, 2, 0},
		{"logs in time order", func(o *oracle) {
			// Process B took over key 0 after A was killed: B's log is
			// read first, yet A handled seqs 0..1 before B handled 1..2.
			b := childLog{tag: "B", done: []logDone{{p: 0, off: 1, key: 0, seq: 1, gen: 2, at: at(10)}, {p: 0, off: 2, key: 0, seq: 2, gen: 2, at: at(11)}}}
			a := childLog{tag: "A", done: []logDone{{p: 0, off: 0, key: 0, seq: 0, gen: 1, at: at(1)}, {p: 0, off: 1, key: 0, seq: 1, gen: 1, at: at(2)}}}
			feedLogs(o, []childLog{b, a})
			o.uncleanEnd("A", map[int32]broker.Commit{0: {Offset: 1}})
		}, 1, 0, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newOracle(t, "self", "t", []uint32{3})
			tt.feed(o)
			v := o.verdict(map[int32][]int64{0: {0, 1, 2}}, map[int32]int64{0: 3})
			if v.Duplicates != tt.dups || v.Unjustified != tt.unjust || v.DupBound != tt.bound || v.OrderViolations != tt.order {
				t.Errorf("got duplicates %d, outside the bound %d, bound %d, order violations %d; want %d, %d, %d, %d",
					v.Duplicates, v.Unjustified, v.DupBound, v.OrderViolations, tt.dups, tt.unjust, tt.bound, tt.order)
			}
		})
	}
}
