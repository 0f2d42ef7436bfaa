package group

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestTraceHook: Config.Trace sees every Do call's messages with their
// headers, the ctx it returns is the one Do gets, and its end func gets
// Do's result.
func TestTraceHook(t *testing.T) {
	r := newRig(t, "trace", 2, 400, 10)
	w := r.work(0, 0)
	type spanKey struct{}
	var mu sync.Mutex
	started, ended, failed, seen := 0, 0, 0, 0
	failOnce := true
	cfg := r.config("trace")
	cfg.Size, cfg.Num = 8, 2
	cfg.Trace = func(ctx context.Context, msgs []*Message) (context.Context, func(error)) {
		mu.Lock()
		started++
		seen += len(msgs)
		mu.Unlock()
		return context.WithValue(ctx, spanKey{}, len(msgs)), func(err error) {
			mu.Lock()
			defer mu.Unlock()
			ended++
			if err != nil {
				failed++
			}
		}
	}
	g := newGroup(t, cfg, func(ctx context.Context, b []*Message) error {
		if n, _ := ctx.Value(spanKey{}).(int); n != len(b) {
			t.Errorf("Do's ctx: got the span of %d messages, want %d", n, len(b))
		}
		mu.Lock()
		fail := failOnce
		failOnce = false
		mu.Unlock()
		if fail {
			return errors.New("first call fails")
		}
		return w.Do(ctx, b)
	})
	stop := run(t, g)
	r.waitAllCommitted("trace", time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if started != ended || failed < 1 || seen < 400 {
		t.Fatalf("trace hook: got %d started, %d ended, %d failed, %d messages seen; want started = ended, at least 1 failed, 400 seen", started, ended, failed, seen)
	}
	r.check(false)
}
