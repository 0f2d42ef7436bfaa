package localqueue

import (
	"context"
	"os"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	diskqueue "github.com/nsqio/go-diskqueue"
)

// benchEnv gates the side-by-side measurements (ratios and CPU figures)
// that take several seconds: ORDERLY_BENCH=1 go test -run Measure ./localqueue/
const benchEnv = "ORDERLY_BENCH"

func benchScanner(b *testing.B) *Scanner {
	b.Helper()
	s, err := NewScanner(ScannerOptions{})
	if err != nil {
		b.Fatalf("NewScanner: %v", err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func benchQueue(b *testing.B, o Options) *Queue {
	b.Helper()
	o.Name = "bench"
	o.Scanner = benchScanner(b)
	q, err := Open(o)
	if err != nil {
		b.Fatalf("Open: %v", err)
	}
	b.Cleanup(func() { q.Close() })
	return q
}

// BenchmarkMemoryPutGetFinish is one message's full cycle through the
// memory chan on one goroutine.
func BenchmarkMemoryPutGetFinish(b *testing.B) {
	q := benchQueue(b, Options{MemQueueSize: DefaultMemQueueSize})
	body := make([]byte, 100)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		putGetFinish(b, q, ctx, body)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
}

// BenchmarkMemoryPutGetFinishParallel runs the cycle on GOMAXPROCS
// goroutines sharing one queue.
func BenchmarkMemoryPutGetFinishParallel(b *testing.B) {
	q := benchQueue(b, Options{MemQueueSize: DefaultMemQueueSize})
	body := make([]byte, 100)
	b.ReportAllocs()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			putGetFinish(b, q, ctx, body)
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
}

// BenchmarkMemoryPipeline is the usual shape: one goroutine puts, another
// gets and finishes, on a queue with nsqd's default memory chan.
func BenchmarkMemoryPipeline(b *testing.B) {
	q := benchQueue(b, Options{MemQueueSize: DefaultMemQueueSize})
	body := make([]byte, 100)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		ctx := context.Background()
		for range b.N {
			m, err := q.Get(ctx)
			if err != nil {
				done <- err
				return
			}
			if err := q.Finish(m.ID); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for range b.N {
		if _, err := q.Put(body); err != nil {
			b.Fatalf("Put: %v", err)
		}
	}
	if err := <-done; err != nil {
		b.Fatalf("consumer: %v", err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
}

func putGetFinish(b *testing.B, q *Queue, ctx context.Context, body []byte) {
	if _, err := q.Put(body); err != nil {
		b.Fatalf("Put: %v", err)
	}
	m, err := q.Get(ctx)
	if err != nil {
		b.Fatalf("Get: %v", err)
	}
	if err := q.Finish(m.ID); err != nil {
		b.Fatalf("Finish: %v", err)
	}
}

const diskBody = 1 << 10

// BenchmarkDisk compares a message's cycle through disk (1 KiB body,
// SyncEvery 2500, MemQueueSize 0) with raw go-diskqueue Put + ReadChan on
// the same settings.
func BenchmarkDisk(b *testing.B) {
	b.Run("raw-diskqueue", benchRawDiskqueue)
	b.Run("localqueue", benchLocalqueueDisk)
}

func benchRawDiskqueue(b *testing.B) {
	dq := diskqueue.New("raw", b.TempDir(), DefaultMaxBytesPerFile, 0, 1<<20, DefaultSyncEvery, DefaultSyncTimeout,
		func(diskqueue.LogLevel, string, ...any) {})
	defer dq.Close()
	body := make([]byte, diskBody)
	b.SetBytes(diskBody)
	b.ReportAllocs()
	for b.Loop() {
		if err := dq.Put(body); err != nil {
			b.Fatalf("Put: %v", err)
		}
		<-dq.ReadChan()
	}
}

func benchLocalqueueDisk(b *testing.B) {
	q := benchQueue(b, Options{DataPath: b.TempDir(), SyncEvery: DefaultSyncEvery})
	body := make([]byte, diskBody)
	ctx := context.Background()
	b.SetBytes(diskBody)
	b.ReportAllocs()
	for b.Loop() {
		putGetFinish(b, q, ctx, body)
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// run times f(n) in wall clock and process CPU time. CPU time is the
// steadier figure on a shared machine: it leaves out the time other
// processes had the cores.
func run(t *testing.T, n int, f func(n int)) (msgPerSec, cpuNsPerMsg float64) {
	t.Helper()
	runtime.GC()
	c0, w0 := cpuTime(t), time.Now()
	f(n)
	wall, cpu := time.Since(w0), cpuTime(t)-c0
	return float64(n) / wall.Seconds(), float64(cpu.Nanoseconds()) / float64(n)
}

func openForMeasure(t *testing.T, o Options) *Queue {
	t.Helper()
	o.Name = "measure"
	q, err := Open(o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return q
}

func loopPutGetFinish(t *testing.T, q *Queue, body []byte, n int) {
	ctx := context.Background()
	for range n {
		if _, err := q.Put(body); err != nil {
			t.Fatalf("Put: %v", err)
		}
		m, err := q.Get(ctx)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if err := q.Finish(m.ID); err != nil {
			t.Fatalf("Finish: %v", err)
		}
	}
}

// TestMeasureThroughput prints msg/s in memory and the disk throughput
// ratio against raw go-diskqueue, and holds them to the targets (2M msg/s,
// 0.8x). Disk rounds run raw, localqueue, localqueue, raw (ABBA) so that
// drift on a shared machine cancels; the ratio is the median over rounds.
func TestMeasureThroughput(t *testing.T) {
	if os.Getenv(benchEnv) == "" {
		t.Skip("set " + benchEnv + "=1 to measure")
	}
	const memRounds, memN = 5, 1_000_000
	const diskRounds, diskN = 9, 30_000
	var memRate, memCPU, pipeRate, pipeCPU []float64
	small, big := make([]byte, 100), make([]byte, diskBody)
	for round := range memRounds {
		q := openForMeasure(t, Options{MemQueueSize: DefaultMemQueueSize})
		r, c := run(t, memN, func(n int) { loopPutGetFinish(t, q, small, n) })
		memRate, memCPU = append(memRate, r), append(memCPU, c)
		r, c = run(t, memN, func(n int) {
			done := make(chan struct{})
			go func() {
				defer close(done)
				ctx := context.Background()
				for range n {
					m, err := q.Get(ctx)
					if err != nil {
						t.Errorf("Get: %v", err)
						return
					}
					q.Finish(m.ID)
				}
			}()
			for range n {
				q.Put(small)
			}
			<-done
		})
		pipeRate, pipeCPU = append(pipeRate, r), append(pipeCPU, c)
		q.Close()
		t.Logf("memory round %d: one goroutine %.2fM msg/s (%.0f CPU-ns/msg), producer+consumer %.2fM msg/s (%.0f CPU-ns/msg)",
			round, memRate[round]/1e6, memCPU[round], pipeRate[round]/1e6, pipeCPU[round])
	}

	raw := func() (float64, float64) {
		dq := diskqueue.New("raw", t.TempDir(), DefaultMaxBytesPerFile, 0, 1<<20, DefaultSyncEvery, DefaultSyncTimeout,
			func(diskqueue.LogLevel, string, ...any) {})
		defer dq.Close()
		return run(t, diskN, func(n int) {
			for range n {
				if err := dq.Put(big); err != nil {
					t.Fatalf("Put: %v", err)
				}
				<-dq.ReadChan()
			}
		})
	}
	local := func() (float64, float64) {
		q := openForMeasure(t, Options{DataPath: t.TempDir(), SyncEvery: DefaultSyncEvery})
		defer q.Close()
		return run(t, diskN, func(n int) { loopPutGetFinish(t, q, big, n) })
	}
	var ratio, cpuRatio []float64
	for round := range diskRounds {
		r1, c1 := raw()
		l1, d1 := local()
		l2, d2 := local()
		r2, c2 := raw()
		ratio = append(ratio, (l1+l2)/(r1+r2))
		cpuRatio = append(cpuRatio, (c1+c2)/(d1+d2))
		t.Logf("disk round %d: raw go-diskqueue %.0fk msg/s (%.0f CPU-ns/msg), localqueue %.0fk msg/s (%.0f CPU-ns/msg): ratio %.2f (by CPU time %.2f)",
			round, (r1+r2)/2e3, (c1+c2)/2, (l1+l2)/2e3, (d1+d2)/2, ratio[round], cpuRatio[round])
	}
	t.Logf("medians: memory one goroutine %.2fM msg/s (%.0f CPU-ns/msg), producer+consumer %.2fM msg/s (%.0f CPU-ns/msg); disk throughput ratio %.2f (by CPU time %.2f)",
		median(memRate)/1e6, median(memCPU), median(pipeRate)/1e6, median(pipeCPU), median(ratio), median(cpuRatio))
	if m := max(median(memRate), median(pipeRate)); m < 2e6 {
		t.Errorf("memory throughput: got %.2fM msg/s, want at least 2M", m/1e6)
	}
	if r := median(ratio); r < 0.8 {
		t.Errorf("disk throughput vs raw go-diskqueue: got %.2fx, want at least 0.8x", r)
	}
}

func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestMeasureScannerIdleCPU prints the process CPU used by a default
// scanner over 10k queues, idle and with a not-yet-due message in flight
// in each, and holds it under 1% of one core.
func TestMeasureScannerIdleCPU(t *testing.T) {
	if os.Getenv(benchEnv) == "" {
		t.Skip("set " + benchEnv + "=1 to measure")
	}
	const n, window = 10_000, 3 * time.Second
	s, err := NewScanner(ScannerOptions{})
	if err != nil {
		t.Fatalf("NewScanner: %v", err)
	}
	defer s.Close()
	qs := openMany(t, s, "idle", n, Options{MemQueueSize: 1, MsgTimeout: time.Hour})
	measure := func(what string) {
		time.Sleep(500 * time.Millisecond) // let Open's allocations settle
		c0, w0 := cpuTime(t), time.Now()
		time.Sleep(window)
		pct := 100 * float64(cpuTime(t)-c0) / float64(time.Since(w0))
		active, _ := s.counts()
		t.Logf("%s: %d queues (%d active), %.3f%% of one core", what, n, active, pct)
		if pct >= 1 {
			t.Errorf("%s: scanner CPU got %.3f%% of one core, want under 1%%", what, pct)
		}
	}
	measure("idle")
	for _, q := range qs {
		mustPut(t, q, "x")
		mustGet(t, q)
	}
	measure("one message in flight each, due in an hour")
}

// TestMeasureIdleDiskQueuesCPU prints the process CPU of 10k idle queues
// with a DataPath: go-diskqueue runs an ioLoop with a SyncTimeout ticker per
// queue, which is the floor for disk-backed queues (the scanner adds
// nothing while they are idle).
func TestMeasureIdleDiskQueuesCPU(t *testing.T) {
	if os.Getenv(benchEnv) == "" {
		t.Skip("set " + benchEnv + "=1 to measure")
	}
	const n, window = 10_000, 3 * time.Second
	s, err := NewScanner(ScannerOptions{})
	if err != nil {
		t.Fatalf("NewScanner: %v", err)
	}
	defer s.Close()
	dir := t.TempDir()
	openMany(t, s, "disk", n, Options{DataPath: dir})
	time.Sleep(500 * time.Millisecond)
	c0, w0 := cpuTime(t), time.Now()
	time.Sleep(window)
	pct := 100 * float64(cpuTime(t)-c0) / float64(time.Since(w0))
	t.Logf("%d idle disk queues (SyncTimeout %v): %.3f%% of one core", n, DefaultSyncTimeout, pct)
}
