package localqueue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestNewScannerRejectsBadOptions(t *testing.T) {
	tests := []struct {
		name  string
		opts  ScannerOptions
		field string
	}{
		{"negative ScanInterval", ScannerOptions{ScanInterval: -1}, "ScanInterval"},
		{"negative SelectionCount", ScannerOptions{SelectionCount: -1}, "SelectionCount"},
		{"DirtyPercent above 1", ScannerOptions{DirtyPercent: 25}, "DirtyPercent"},
		{"negative DirtyPercent", ScannerOptions{DirtyPercent: -0.5}, "DirtyPercent"},
		{"negative WorkerPoolMax", ScannerOptions{WorkerPoolMax: -1}, "WorkerPoolMax"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewScanner(tt.opts)
			if err == nil {
				s.Close()
				t.Fatalf("NewScanner: got nil error, want one naming %s", tt.field)
			}
			if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("NewScanner: got %v, want ErrOptions naming %s", err, tt.field)
			}
		})
	}
}

func TestScannerClose(t *testing.T) {
	s, err := NewScanner(ScannerOptions{})
	if err != nil {
		t.Fatalf("NewScanner: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: got %v, want ErrClosed", err)
	}
	if _, err := Open(Options{Name: "q", Scanner: s}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Open with a closed scanner: got %v, want ErrClosed", err)
	}
}

// openMany opens n memory queues named prefix-i on s.
func openMany(t testing.TB, s *Scanner, prefix string, n int, o Options) []*Queue {
	t.Helper()
	qs := make([]*Queue, n)
	for i := range qs {
		o.Name = fmt.Sprintf("%s-%d", prefix, i)
		o.Scanner = s
		q, err := Open(o)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		qs[i] = q
	}
	t.Cleanup(func() {
		for _, q := range qs {
			q.Close()
		}
	})
	return qs
}

// TestScannerIdleAndBusy: with 10k idle queues and a few busy ones the busy
// ones still get their timeouts processed, the idle ones never enter the
// active set, and the pool follows the registered count.
func TestScannerIdleAndBusy(t *testing.T) {
	s := startScanner(t, ScannerOptions{ScanInterval: 5 * time.Millisecond})
	idle := openMany(t, s, "idle", 10_000, Options{MemQueueSize: 1})
	busy := openMany(t, s, "busy", 3, Options{MemQueueSize: 10, MsgTimeout: 20 * time.Millisecond})
	eventually(t, "pool grows to WorkerPoolMax", func() bool { return s.workers.Load() == DefaultWorkerPoolMax })

	for _, q := range busy {
		mustPut(t, q, "x")
		mustGet(t, q) // never finished: the scanner must time it out
	}
	if a, r := s.counts(); a != len(busy) || r != len(idle)+len(busy) {
		t.Fatalf("active, registered: got %d, %d, want %d, %d", a, r, len(busy), len(idle)+len(busy))
	}
	for _, q := range busy {
		m := mustGet(t, q)
		if m.Attempts != 2 {
			t.Fatalf("%s redelivery: got attempts %d, want 2", q.Name(), m.Attempts)
		}
		mustFinish(t, q, m.ID)
	}
	eventually(t, "finished queues leave the active set", func() bool { a, _ := s.counts(); return a == 0 })

	for _, q := range idle {
		q.Close()
	}
	eventually(t, "pool shrinks to 1", func() bool { return s.workers.Load() == 1 })
}

// TestScannerNoLostWakeup: every message is abandoned on its first
// delivery and finished on its second, by several consumers at once, so
// the run ends only if the scanner handled every single timeout while
// queues kept joining and leaving the active set.
func TestScannerNoLostWakeup(t *testing.T) {
	s := startScanner(t, ScannerOptions{ScanInterval: time.Millisecond, SelectionCount: 2, WorkerPoolMax: 2})
	qs := openMany(t, s, "q", 8, Options{MemQueueSize: 64, MsgTimeout: 2 * time.Millisecond})
	const perQueue = 200
	var finished atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, q := range qs {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for finished.Load() < int64(len(qs)*perQueue) {
					m, err := q.Get(ctx)
					if err != nil {
						return
					}
					if m.Attempts >= 2 && q.Finish(m.ID) == nil {
						finished.Add(1)
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perQueue {
				if _, err := q.Put([]byte(fmt.Sprint(i))); err != nil {
					t.Errorf("Put: %v", err)
				}
			}
		}()
	}
	eventually(t, "every message finished", func() bool { return finished.Load() == int64(len(qs)*perQueue) })
	cancel()
	wg.Wait()
}
