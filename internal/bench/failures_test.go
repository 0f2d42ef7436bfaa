package bench

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/loadgen"
)

// TestFailureCost measures what the failure path costs against the same
// run without failures, side by side in alternating rounds (issue 9's
// benchmarks): 1% of messages failing twice with a 10-100 ms backoff; one
// poison message per 10k with MaxAttempts 3 (dead-lettered to the local
// store); Unordered with 1% of messages deferred 200 ms and so parked on
// disk, against Unordered without. Every run: Num 64, Size 1, a handler
// sleeping 1 ms per call (simulated I/O), 600k messages over 8 partitions
// (about 10 s), timed from the first call to the last message done.
//
//	ORDERLY_BENCH=1 go test ./internal/bench -run TestFailureCost -v -timeout 30m
//
// ORDERLY_BENCH_PAIR runs only the pairs whose "with" mode (retry, poison,
// park) it names, comma-separated; ORDERLY_BENCH_MESSAGES and
// ORDERLY_BENCH_ROUNDS change the size; ORDERLY_BENCH_PROFILE=dir writes a
// CPU, a block and a mutex profile of every run there, named after its mode
// and sequence number (the block and mutex profiles sample every event and
// are cumulative over the process; compare ratios from runs without it).
func TestFailureCost(t *testing.T) {
	if os.Getenv("ORDERLY_BENCH") == "" {
		t.Skip("set ORDERLY_BENCH=1: about 5 minutes")
	}
	const parts, keys = 8, 10_000
	n := envInt(t, "ORDERLY_BENCH_MESSAGES", 600_000)
	rounds := envInt(t, "ORDERLY_BENCH_ROUNDS", 3)
	b, err := broker.Start(broker.Config{Topics: []string{"failures"}, Partitions: parts})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if err := loadgen.Produce(ctx, b.Addrs(), "failures", n, func(i int) loadgen.Record {
		return loadgen.Record{Key: fmt.Appendf(nil, "k%d", i%keys), Value: make([]byte, 100)}
	}); err != nil {
		t.Fatal(err)
	}
	type pair struct{ name, base, with string }
	pairs := []pair{
		{"1% fail twice, backoff 10-100ms", "none", "retry"},
		{"1 poison per 10k, MaxAttempts 3", "none", "poison"},
		{"Unordered, 1% parked", "unordered", "park"},
	}
	if only := os.Getenv("ORDERLY_BENCH_PAIR"); only != "" {
		names := strings.Split(only, ",")
		pairs = slices.DeleteFunc(pairs, func(p pair) bool { return !slices.Contains(names, p.with) })
		if len(pairs) == 0 {
			t.Fatalf("ORDERLY_BENCH_PAIR=%q names none of retry, poison, park", only)
		}
	}
	ratios := map[string][]float64{}
	seq := 0
	for round := range rounds {
		for _, p := range pairs {
			order := []string{p.base, p.with}
			if round%2 == 1 {
				order = []string{p.with, p.base}
			}
			rate := map[string]float64{}
			for _, mode := range order {
				seq++
				stop := startProfiles(t, fmt.Sprintf("%s-%d", mode, seq))
				rate[mode] = failureRun(t, b, mode, n, fmt.Sprintf("failures-%d", seq))
				stop()
			}
			ratios[p.name] = append(ratios[p.name], rate[p.with]/rate[p.base])
			t.Logf("round %d %s: %.0f msg/s against %.0f msg/s: %.3fx", round, p.name, rate[p.with], rate[p.base], rate[p.with]/rate[p.base])
		}
	}
	for _, p := range pairs {
		r := ratios[p.name]
		sort.Float64s(r)
		t.Logf("%s: median %.3fx of its run without (rounds %v)", p.name, r[len(r)/2], r)
	}
}

// startProfiles starts a CPU profile and block and mutex sampling when
// $ORDERLY_BENCH_PROFILE names a directory, and returns what writes them
// there as name.cpu, name.block and name.mutex.
func startProfiles(t *testing.T, name string) (stop func()) {
	t.Helper()
	dir := os.Getenv("ORDERLY_BENCH_PROFILE")
	if dir == "" {
		return func() {}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cpu, err := os.Create(filepath.Join(dir, name+".cpu"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		t.Fatal(err)
	}
	runtime.SetBlockProfileRate(1)
	runtime.SetMutexProfileFraction(1)
	return func() {
		pprof.StopCPUProfile()
		if err := cpu.Close(); err != nil {
			t.Error(err)
		}
		for _, prof := range []string{"block", "mutex"} {
			f, err := os.Create(filepath.Join(dir, name+"."+prof))
			if err != nil {
				t.Fatal(err)
			}
			if err := pprof.Lookup(prof).WriteTo(f, 0); err != nil {
				t.Error(err)
			}
			if err := f.Close(); err != nil {
				t.Error(err)
			}
		}
		// Sampling stops between runs, but the block and mutex profiles
		// are cumulative over the process: read a run's own events with
		// go tool pprof -diff_base on the run before it.
		runtime.SetBlockProfileRate(0)
		runtime.SetMutexProfileFraction(0)
	}
}

// chosen picks about one message in every k by a hash of its coordinates.
func chosen(m *group.Message, k uint32) bool {
	h := fnv.New32a()
	fmt.Fprintf(h, "%d/%d", m.Partition, m.Offset)
	return h.Sum32()%k == 0
}

// failureRun consumes the whole topic once as groupID in the given mode
// and returns messages per second from the first call to the last message
// done.
func failureRun(t *testing.T, b *broker.Broker, mode string, n int, groupID string) float64 {
	t.Helper()
	cfg := group.Config{
		Brokers: b.Addrs(), Topics: []string{"failures"}, GroupID: groupID, Sarama: SaramaConfig(1024),
		Num: 64, Size: 1, Ticker: -1,
		Retry: group.Retry{Backoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond},
	}
	switch mode {
	case "poison":
		cfg.DataPath = t.TempDir()
		cfg.Retry.MaxAttempts = 3
	case "unordered":
		cfg.Ordering = group.Unordered
	case "park":
		cfg.Ordering, cfg.DataPath = group.Unordered, t.TempDir()
	}
	var mu sync.Mutex
	done := make(map[[2]int64]struct{}, n)
	var first atomic.Int64
	var last atomic.Int64
	var doneCount atomic.Int64
	deferred := sync.Map{}
	g, err := group.New(cfg, group.Handler[*group.Message]{Do: func(_ context.Context, batch []*group.Message) error {
		first.CompareAndSwap(0, time.Now().UnixNano())
		time.Sleep(time.Millisecond)
		m := batch[0]
		switch mode {
		case "retry":
			if m.Attempt < 3 && chosen(m, 100) {
				return errors.New("transient")
			}
		case "poison":
			if chosen(m, 10_000) {
				return errors.New("poison")
			}
		case "park":
			if _, again := deferred.LoadOrStore([2]int64{int64(m.Partition), m.Offset}, true); !again && chosen(m, 100) {
				var be group.BatchError
				be.Defer(0, 200*time.Millisecond)
				return be.Err()
			}
		}
		mu.Lock()
		done[[2]int64{int64(m.Partition), m.Offset}] = struct{}{}
		mu.Unlock()
		last.Store(time.Now().UnixNano())
		doneCount.Add(1)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- g.Run(ctx) }()
	want := int64(n)
	if mode == "poison" {
		want = 0 // counted below: the poison ones never finish in Do
	}
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		st := g.Stats()
		if (want > 0 && doneCount.Load() >= want) || (want == 0 && st.Committed >= int64(n) && st.DeadLetterPending == 0 && st.Handled+st.DeadLettered.MaxAttempts >= int64(n)) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := len(done)
	mu.Unlock()
	st := g.Stats()
	if mode != "poison" && got < n {
		t.Fatalf("%s: %d of %d messages done", mode, got, n)
	}
	elapsed := time.Duration(last.Load() - first.Load())
	t.Logf("%s: %d done in %v (%.0f msg/s); retries %d, dead letters %+v, parked now %d", mode, got, elapsed.Round(time.Millisecond),
		float64(got)/elapsed.Seconds(), st.Retries, st.DeadLettered, st.Parked)
	return float64(got) / elapsed.Seconds()
}
