package group

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestMsgTimeoutDeadline (Config.MsgTimeout): Do's ctx has a deadline
// MsgTimeout after the call's start (5m by default), and none with -1.
func TestMsgTimeoutDeadline(t *testing.T) {
	t.Parallel() // mostly waits on the broker
	for _, tt := range []struct {
		name    string
		timeout time.Duration
		want    time.Duration // 0: no deadline
	}{
		{"default", 0, DefaultMsgTimeout},
		{"set", time.Minute, time.Minute},
		{"none", -1, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, "deadline-"+tt.name, 1, 20, 5)
			w := r.work(0, 0)
			var mu sync.Mutex
			var problems []string
			cfg := r.config("deadline-" + tt.name)
			cfg.Size, cfg.MsgTimeout = 1, tt.timeout
			g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
				start := time.Now()
				d, ok := ctx.Deadline()
				mu.Lock()
				switch {
				case tt.want == 0 && ok:
					problems = append(problems, fmt.Sprintf("offset %d: got a deadline %v after the call's start, want none", batch[0].Offset, d.Sub(start)))
				case tt.want != 0 && !ok:
					problems = append(problems, fmt.Sprintf("offset %d: got no deadline, want one %v after the call's start", batch[0].Offset, tt.want))
				case tt.want != 0 && (d.Sub(start) > tt.want || d.Sub(start) < tt.want-10*time.Second): // Do began after the call's start
					problems = append(problems, fmt.Sprintf("offset %d: got a deadline %v after the call's start, want %v", batch[0].Offset, d.Sub(start), tt.want))
				}
				mu.Unlock()
				return w.Do(ctx, batch)
			})
			r.runToEnd(g, cfg.GroupID)
			mu.Lock()
			defer mu.Unlock()
			for i, p := range problems {
				if i == 3 {
					break
				}
				t.Error(p)
			}
			r.check(false)
		})
	}
}

// TestRunWaitsForHungDo (Config.MsgTimeout): with Unordered, a Do that
// ignores its ctx past MsgTimeout has its message handed to another worker
// and the partition goes on, but Run returns only once that Do has
// returned.
func TestRunWaitsForHungDo(t *testing.T) {
	t.Parallel() // mostly waits on the broker and the timeouts
	r := newRig(t, "hung-run", 1, 50, 5)
	w := r.work(0, 0)
	hung, rel := make(chan struct{}), make(chan struct{})
	var hangOnce, releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(rel) }) }
	defer release()
	var returned atomic.Bool
	wrapped := func(ctx context.Context, batch []*Message) error {
		if batch[0].Offset != 3 || batch[0].Attempt != 1 {
			return w.Do(ctx, batch)
		}
		first := false
		hangOnce.Do(func() { first = true; close(hung) })
		if !first { // a redelivery at attempt 1 (a lost session): not the call under test
			return w.Do(ctx, batch)
		}
		<-rel // ignores ctx
		returned.Store(true)
		return nil
	}
	cfg := r.config("hung-run")
	cfg.Size, cfg.Num, cfg.Ordering, cfg.MsgTimeout = 1, 2, Unordered, 100*time.Millisecond
	g := newGroup(t, cfg, wrapped)
	stop := run(t, g)
	select {
	case <-hung:
	case <-time.After(time.Minute):
		t.Fatal("offset 3 never reached Do")
	}
	r.waitAllCommitted(cfg.GroupID, time.Minute) // the copy ran elsewhere
	done := make(chan error, 1)
	go func() { done <- stop() }()
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) while a Do call was still running", err)
	case <-time.After(time.Second):
	}
	release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return within a minute of the hung Do returning")
	}
	if !returned.Load() {
		t.Fatal("Run returned before the hung Do did")
	}
}
