package group

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/deadletter"
)

// TestBatchErrorDeadLetter: items Do names with BatchError.DeadLetter are
// dead-lettered at once, never handed out again: with DeadLetterTopic,
// each is in that topic once, with reason "rejected", its attempt and the
// error's text; with no destination, each is skipped, counted in
// Stats.DeadLetterSkipped and logged by topic, partition and offset (the
// warnings are rate-limited: one names a skipped message). As
// BatchError promises, the later messages of a named item's lane in the
// same batch are handed out again after it, uncharged (Attempt 1), and
// every other message once. Either way the source's commits reach its
// high watermark.
func TestBatchErrorDeadLetter(t *testing.T) {
	for _, tc := range []struct {
		name string
		dlq  string // DeadLetterTopic; "": none
	}{
		{"dead-letter topic", "reject-dlq"},
		{"no destination", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // mostly waits on the broker
			const topic, n = "reject", 200
			isRejected := func(off int64) bool { return off%50 == 7 }
			var rejected []int64
			for off := range int64(n) {
				if isRejected(off) {
					rejected = append(rejected, off)
				}
			}
			b, err := broker.Start(broker.Config{Topics: []string{topic}, Partitions: 1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(b.Close)
			if tc.dlq != "" {
				if err := b.CreateTopic(tc.dlq, 1); err != nil {
					t.Fatal(err)
				}
			}
			produceSeq(t, b, topic, n, 4) // few keys: a batch holds several items of a lane
			var mu sync.Mutex
			calls := map[int64]int{}  // offset: Do calls that held it
			again := map[int64]bool{} // offsets behind a rejected one of their lane in a batch
			charged := 0              // deliveries with Attempt above 1
			cfg := fastConfig(t, b.Addrs(), topic, "reject")
			logger, logs := observed()
			cfg.Logger, cfg.DeadLetterTopic = logger, tc.dlq
			cfg.Size, cfg.Num = 16, 2
			g := newGroup(t, cfg, func(_ context.Context, batch []*Message) error {
				mu.Lock()
				defer mu.Unlock()
				var be BatchError
				named := map[string]bool{} // keys with a rejected item earlier in this batch
				for i, m := range batch {
					calls[m.Offset]++
					if m.Attempt > 1 {
						charged++
					}
					if named[string(m.Key)] {
						again[m.Offset] = true
					}
					if isRejected(m.Offset) {
						be.DeadLetter(i, fmt.Errorf("record %d is malformed", m.Offset))
						named[string(m.Key)] = true
					}
				}
				return be.Err()
			})
			stop := run(t, g)
			waitFor(t, time.Minute, "every message committed", func() bool { return b.CaughtUp("reject", topic) })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			for off := range int64(n) {
				switch {
				case again[off] && calls[off] < 2:
					t.Errorf("offset %d: in %d Do calls, want it handed out again after the rejected item before it in its batch", off, calls[off])
				case !again[off] && calls[off] != 1:
					t.Errorf("offset %d: in %d Do calls, want 1", off, calls[off])
				}
			}
			if charged != 0 {
				t.Errorf("%d deliveries with Attempt above 1: want none (a rejected item is not retried, and those behind it are not charged)", charged)
			}
			if len(again) == 0 {
				t.Error("no batch held a lane's later messages behind a rejected one: the hand-out-again case was not exercised")
			}
			t.Logf("%d messages handed out again behind a rejected one", len(again))
			mu.Unlock()
			st := g.Stats()
			if tc.dlq == "" {
				if st.DeadLetterSkipped != int64(len(rejected)) {
					t.Errorf("Stats.DeadLetterSkipped: got %d, want %d", st.DeadLetterSkipped, len(rejected))
				}
				found := false
				for _, off := range rejected {
					found = found || logged(logs, "no dead-letter destination (DeadLetterTopic, DataPath): message skipped",
						map[string]any{"topic": topic, "partition": int32(0), "offset": off, "reason": deadletter.ReasonRejected})
				}
				if !found {
					t.Errorf("no warning names a skipped message by topic, partition, offset and reason; got %d warnings", logs.Len())
				}
				return
			}
			if st.DeadLetterSkipped != 0 {
				t.Errorf("Stats.DeadLetterSkipped: got %d, want 0 with a dead-letter topic", st.DeadLetterSkipped)
			}
			got := map[int64]deadletter.Info{}
			for _, info := range readDeadLetterInfos(t, b.Addrs(), tc.dlq) {
				if _, dup := got[info.Offset]; dup {
					t.Errorf("offset %d: dead-lettered twice", info.Offset)
				}
				got[info.Offset] = info
			}
			if len(got) != len(rejected) {
				t.Errorf("dead letters: got %d offsets, want %d (%v)", len(got), len(rejected), rejected)
			}
			for _, off := range rejected {
				info, ok := got[off]
				switch {
				case !ok:
					t.Errorf("offset %d: no dead letter", off)
				case info.Topic != topic || info.Partition != 0 || info.Reason != deadletter.ReasonRejected || info.Attempts != 1 ||
					!strings.Contains(info.Message, fmt.Sprintf("record %d is malformed", off)):
					t.Errorf("offset %d: got dead letter %+v, want topic %s partition 0, reason %q, 1 attempt and the error's text", off, info, topic, deadletter.ReasonRejected)
				}
			}
		})
	}
}
