package group

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/orderly-go/orderly/internal/ledger"
)

// Reliability scenario 9: a committed offset below the log start, after
// DeleteRecords (as retention does it), when a claim starts and while a
// lagging consumer runs: reported, and consumption follows OnOffsetReset,
// never a silent skip, a hang or an unconsumed partition.

// observedTee is a logger that writes to the test log and keeps the entries.
func observedTee(t *testing.T) (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.InfoLevel)
	return zap.New(zapcore.NewTee(core, zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)).Core())), logs
}

// resetWarnings returns the offset-reset warnings by partition.
func resetWarnings(logs *observer.ObservedLogs) map[int32]map[string]any {
	out := map[int32]map[string]any{}
	for _, e := range logs.FilterMessageSnippet("committed offset out of range: reset").All() {
		f := e.ContextMap()
		out[f["partition"].(int32)] = f
	}
	return out
}

// TestScenario09ResetAtStart: a group commits everything of a first half
// and stops; the second half is produced and the first 250 records of it
// deleted on each partition. ResetFollow: the group goes on from the log
// start and says so (a warning per partition with the committed offset,
// the log start and 250 skipped; Stats.OffsetResets 2, SkippedByReset
// 500). ResetRefuse: Run ends with ErrOffsetReset naming the partition,
// and the committed offsets stay where they were.
func TestScenario09ResetAtStart(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	for _, policy := range []ResetPolicy{ResetFollow, ResetRefuse} {
		t.Run(policy.String(), func(t *testing.T) {
			const partitions, n, keys, gone = 2, 4000, 40, 250
			r, o := oracleRig(t, "9 committed offset below the log start at start, "+policy.String(), "reset-start", partitions, n, keys)
			cfg := r.config("reset-start")
			cfg.OnOffsetReset = policy
			first := &member{tag: "first", o: o}
			r.produce(0, n/2)
			stop := first.start(t, cfg)
			r.waitAllCommitted(cfg.GroupID, time.Minute)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			committed := r.b.Committed(cfg.GroupID, r.topic)
			r.produce(n/2, n)
			to := map[int32]int64{}
			for p, c := range committed {
				to[p] = c + gone
			}
			deleteRecords(t, r.b.Addrs(), r.topic, to)

			logger, logs := observedTee(t)
			cfg.Logger = logger
			second := &member{tag: "second", o: o}
			g := newGroup(t, cfg, second.Do)
			second.g.Store(g)
			stop, ended := runWatched(t, g)
			if policy == ResetRefuse {
				var err error
				waitFor(t, 30*time.Second, "Run to end with ErrOffsetReset", func() bool {
					var ok bool
					err, ok = ended()
					return ok
				})
				if !errors.Is(err, ErrOffsetReset) || !strings.Contains(err.Error(), "reset-start/") {
					t.Fatalf("Run: got %v, want ErrOffsetReset naming reset-start/<partition>", err)
				}
				if st := g.Stats(); st.SkippedByReset != 0 || st.OffsetResets != 0 || st.Handled != 0 {
					t.Errorf("after refusing: Stats.OffsetResets %d, SkippedByReset %d, Handled %d; want 0 (nothing skipped)", st.OffsetResets, st.SkippedByReset, st.Handled)
				}
				if after := r.b.Committed(cfg.GroupID, r.topic); fmt.Sprint(after) != fmt.Sprint(committed) {
					t.Errorf("committed offsets: got %v, want them kept at %v", after, committed)
				}
				t.Logf("SCENARIO 9 committed offset below the log start at start, ResetRefuse: Run ended with %v", err)
				return
			}
			r.waitAllCommitted(cfg.GroupID, time.Minute)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			st := g.Stats()
			if st.OffsetResets != partitions || st.SkippedByReset != partitions*gone {
				t.Errorf("Stats.OffsetResets %d, SkippedByReset %d; want %d and %d", st.OffsetResets, st.SkippedByReset, partitions, partitions*gone)
			}
			warned := resetWarnings(logs)
			for p, c := range committed {
				f := warned[p]
				if f == nil || f["committed"] != c || f["log_start"] != c+gone || f["skipped"] != int64(gone) {
					t.Errorf("partition %d: reset warning %v, want committed %d, logStart %d, skipped %d", p, f, c, c+gone, gone)
				}
			}
			below := 0 // every record below the new log starts is gone, handled or not
			for _, off := range to {
				below += int(off)
			}
			o.check(r.b.Addrs(), r.b.Committed(cfg.GroupID, r.topic), want{all: true, deleted: below})
		})
	}
}

// TestScenario09ResetMidRun: a consumer that handles about 500 messages
// a second lags behind a backlog of 4000 on one partition (small fetches,
// a small in-flight share, so its fetch position stays near what it
// handled); the first 2500 records are deleted under it. Its next fetch
// runs out of range. ResetFollow: the member's session restarts, the claim
// starts again from the committed offset, which is reset to the log start
// and reported; every record from there is handled, and the commit reaches
// the high watermark (before, the partition stayed unconsumed until the
// next rebalance). ResetRefuse: Run ends with ErrOffsetReset.
func TestScenario09ResetMidRun(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	for _, policy := range []ResetPolicy{ResetFollow, ResetRefuse} {
		t.Run(policy.String(), func(t *testing.T) {
			const n, keys, deleteTo = 4000, 20, 2500
			plan := make([]planned, n)
			for i := range plan {
				plan[i] = planned{key: uint32(i % keys), part: 0}
			}
			r := newRigQuiet(t, "reset-midrun", 1, plan)
			o := newOracle(t, "9 retention overtakes a lagging consumer, "+policy.String(), r.topic, r.counts)
			r.b.ObserveCommits(o.observe)
			// Batches of about 16 records (a fetch returns whole batches:
			// sarama's producer's batches of 2000 would be fetched far
			// ahead of what the consumer handled).
			prod := newKgo(t, r.b.Addrs(), kgo.ProducerBatchMaxBytes(2<<10), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			recs := make([]*kgo.Record, n)
			for i, p := range plan {
				recs[i] = &kgo.Record{Topic: r.topic, Partition: 0, Key: fmt.Appendf(nil, "k%d", p.key),
					Value: ledger.Encode(nil, p.key, r.seqs[i], time.Time{}, make([]byte, 100))}
			}
			produceKgo(t, prod, recs...)
			cfg := r.config("reset-midrun")
			cfg.OnOffsetReset = policy
			cfg.Size, cfg.Num, cfg.Chan, cfg.MaxInFlight = 1, 1, 16, 16
			cfg.Sarama.Consumer.Fetch.Default = 2 << 10
			logger, logs := observedTee(t)
			cfg.Logger = logger
			m := &member{tag: "lagging", o: o, delay: 2 * time.Millisecond}
			g := newGroup(t, cfg, m.Do)
			m.g.Store(g)
			stop, ended := runWatched(t, g)
			waitFor(t, 30*time.Second, "the consumer to handle 200 messages", func() bool { return g.Stats().Handled >= 200 })
			deleted := time.Now()
			deleteRecords(t, r.b.Addrs(), r.topic, map[int32]int64{0: deleteTo})
			if policy == ResetRefuse {
				var err error
				waitFor(t, 30*time.Second, "Run to end with ErrOffsetReset", func() bool {
					var ok bool
					err, ok = ended()
					return ok
				})
				if !errors.Is(err, ErrOffsetReset) || !strings.Contains(err.Error(), "reset-midrun/0") {
					t.Fatalf("Run: got %v, want ErrOffsetReset naming reset-midrun/0", err)
				}
				t.Logf("SCENARIO 9 retention overtakes a lagging consumer, ResetRefuse: Run ended %v after the delete with %v",
					time.Since(deleted).Round(time.Millisecond), err)
				return
			}
			var resumedIn time.Duration
			waitFor(t, 30*time.Second, "a record past the new log start to be handled", func() bool {
				o.mu.Lock()
				defer o.mu.Unlock()
				for off := int64(deleteTo); off < n; off++ {
					if len(o.comps[tpOff{0, off}]) > 0 {
						resumedIn = time.Since(deleted)
						return true
					}
				}
				return false
			})
			r.waitAllCommitted(cfg.GroupID, time.Minute)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			st := g.Stats()
			o.mu.Lock()
			handledBelow := int64(0)
			for off := int64(0); off < deleteTo; off++ {
				if len(o.comps[tpOff{0, off}]) > 0 {
					handledBelow++
				}
			}
			o.mu.Unlock()
			if st.OutOfRangeMidRun < 1 || st.OffsetResets < 1 || st.SkippedByReset != deleteTo-handledBelow {
				t.Errorf("Stats.OutOfRangeMidRun %d, OffsetResets %d, SkippedByReset %d; want at least 1, at least 1, and %d (deleted before they were handled)",
					st.OutOfRangeMidRun, st.OffsetResets, st.SkippedByReset, deleteTo-handledBelow)
			}
			if f := resetWarnings(logs)[0]; f == nil || f["log_start"] != int64(deleteTo) || f["skipped"] != deleteTo-handledBelow {
				t.Errorf("reset warning: got %v, want logStart %d and skipped %d", f, deleteTo, deleteTo-handledBelow)
			}
			o.check(r.b.Addrs(), r.b.Committed(cfg.GroupID, r.topic), want{all: true, deleted: deleteTo})
			t.Logf("retention overtook the consumer at %d handled; it resumed at the log start %v after the delete (Stats: %d out of range mid-run, %d resets, %d skipped)",
				handledBelow, resumedIn.Round(time.Millisecond), st.OutOfRangeMidRun, st.OffsetResets, st.SkippedByReset)
		})
	}
}
