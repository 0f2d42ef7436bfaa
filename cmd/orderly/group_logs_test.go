package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/loadgen"
)

// logFields are the field names the README's "Logs" section documents:
// the fixed ones first, then those particular to some events. A log
// entry of package group with any other field fails TestGroupLogs.
var logFields = []string{
	// fixed: every entry about a message, partition or session has them
	"group", "topic", "partition", "offset", "lane", "attempt", "member", "generation", "error",
	// particular events
	"topics", "claims", "reason", "destination", "records", "messages", "path", "id",
	"backoff", "timeout", "running", "lasted", "worker", "redelivered", "outages", "probes",
	"batch", "named", "suppressed",
	"dropped", "abandoned", "late", "uncommitted", "unfinished", "cancelled",
	"limit", "bytes", "left", "seen", "committed", "metadata", "metadata_base", "finished_above", "waiting", "try",
	"log_start", "high_watermark", "reset_to", "skipped", "policy", "strategies", "drain_timeout", "msg_timeout", "rebalance_timeout", "net_read_timeout_set", "net_read_timeout", "read_back_time", "heartbeat_interval", "from", "to",
	// localqueue's, on the queue of messages parked under DataPath
	"queue", "depth", "attempts", "memory", "in_flight", "deferred", "in_flight_journaled", "kept_in_journal",
	"file", "first_file", "last_file", "depth_was", "read_file", "content", "data_files", "read_position_kept",
	"dead_letter", "before", "after", "tail", "live", "due", "dead", "unreadable",
	"damaged_regions", "damaged_bytes", "file_error", "dir_error",
	"file_offset", "damage",
}

// logRun is what one run of the failure scenario logged.
type logRun struct {
	n       int
	entries []observer.LoggedEntry
	failed  int64         // Do calls that returned an error or panicked
	took    time.Duration // from Run's start to caught up
}

// runLogScenario runs a group over n records on 4 partitions through
// failures that scale with n: every 100th record fails on its first
// attempt, every 250th always fails (dead-lettered after 2 attempts),
// every 500th does not decode (dead-lettered as poison), and record 42
// panics once. It logs at debug into an observer.
func runLogScenario(t *testing.T, n int) logRun {
	t.Helper()
	const topic, groupID = "events", "logs"
	b, err := broker.Start(broker.Config{Topics: []string{topic}, Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := loadgen.Produce(ctx, b.Addrs(), topic, n, func(i int) loadgen.Record {
		return loadgen.Record{Key: fmt.Appendf(nil, "k%d", i%50), Value: fmt.Appendf(nil, "%d", i)}
	}); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.DebugLevel)
	sc := group.DefaultSarama()
	sc.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	var failed atomic.Int64
	g, err := group.New(group.Config{
		Brokers: b.Addrs(), Topics: []string{topic}, GroupID: groupID, Sarama: sc,
		Size: 16, Num: 4, Ticker: 5 * time.Millisecond, DataPath: t.TempDir(),
		Retry:  group.Retry{Backoff: 5 * time.Millisecond, MaxBackoff: 10 * time.Millisecond, MaxAttempts: 2},
		Logger: zap.New(core),
	}, group.Handler[int]{
		New: func(m *group.Message) (int, error) {
			i, err := strconv.Atoi(string(m.Value))
			if err == nil && i%500 == 13 {
				err = errors.New("poison")
			}
			return i, err
		},
		Split: func(m *group.Message, i int) uint64 { return uint64(i % 50) },
		Do: func(ctx context.Context, batch []int) error {
			var be group.BatchError
			msgs := group.Messages(ctx)
			for k, i := range batch {
				if i == 42 && msgs[k].Attempt == 1 {
					failed.Add(1)
					panic("record 42 panics once")
				}
				if i%250 == 11 || i%100 == 7 && msgs[k].Attempt == 1 {
					be.Fail(k, fmt.Errorf("record %d declined", i))
				}
			}
			if be.Len() > 0 {
				failed.Add(1)
			}
			return be.Err()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var took time.Duration
	if err := broker.WaitUntil(ctx, func() bool {
		took = time.Since(start)
		return b.CaughtUp(groupID, topic)
	}, g.Run); err != nil {
		t.Fatalf("%d records: %v (committed %v, high watermarks %v)", n, err, b.Committed(groupID, topic), b.HighWatermarks(topic))
	}
	return logRun{n: n, entries: logs.All(), failed: failed.Load(), took: took}
}

// fieldNames are the names of an entry's fields, those of its logger's
// With included.
func fieldNames(e observer.LoggedEntry) []string {
	names := make([]string, len(e.Context))
	for i, f := range e.Context {
		names[i] = f.Key
	}
	return names
}

// TestGroupLogs runs a real group with a zap observer through failures
// (retries, a panic, dead letters after MaxAttempts, poison records) at
// two sizes, 400 and 4000 records: every entry uses only the documented
// field names, an entry about an offset also names its topic and
// partition, the info entries do not grow with the number of records (no
// per-message logs at info), and repeated "Do failed" warnings are rate
// limited (at most one a second, the others counted in "suppressed").
func TestGroupLogs(t *testing.T) {
	small, large := runLogScenario(t, 400), runLogScenario(t, 4000)
	infos := map[int]map[string]int{}
	for _, r := range []logRun{small, large} {
		infos[r.n] = map[string]int{}
		var doFailed, reported int64
		for _, e := range r.entries {
			names := fieldNames(e)
			for _, k := range names {
				if !slices.Contains(logFields, k) {
					t.Errorf("%d records: %s entry %q has field %q, not among the documented ones", r.n, e.Level, e.Message, k)
				}
			}
			if slices.Contains(names, "offset") && (!slices.Contains(names, "topic") || !slices.Contains(names, "partition")) {
				t.Errorf("%d records: %s entry %q names an offset without its topic and partition: %v", r.n, e.Level, e.Message, names)
			}
			if e.Level == zapcore.InfoLevel {
				infos[r.n][e.Message]++
			}
			if strings.HasPrefix(e.Message, "Do failed") {
				doFailed++
				reported++
				if s, ok := e.ContextMap()["suppressed"].(int64); ok {
					reported += s
				}
			}
		}
		// One line a second gets through, and the first one at once.
		if limit := int64(r.took/time.Second) + 2; doFailed == 0 || doFailed > limit || reported > r.failed {
			t.Errorf("%d records: %d \"Do failed\" warnings (%d with the suppressed ones) for %d failed calls in %v; want 1 to %d, at most the failed calls",
				r.n, doFailed, reported, r.failed, r.took.Round(time.Millisecond), limit)
		}
	}
	for msg, nLarge := range infos[large.n] {
		// 10 times the records: a per-message entry would be about 10
		// times as frequent; lifecycle entries (claims, sessions) are
		// as many whatever the records, give or take a rebalance or two
		// on a loaded machine.
		if nSmall := infos[small.n][msg]; nLarge > 3*nSmall+4 {
			t.Errorf("info entry %q: %d times for %d records, %d for %d: it grows with the records", msg, nLarge, large.n, nSmall, small.n)
		}
	}
	t.Logf("info entries: %d records %v; %d records %v", small.n, infos[small.n], large.n, infos[large.n])
}
