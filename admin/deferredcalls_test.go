package admin

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/orderly-go/orderly/group"
)

// TestLiveDeferredCallsAreNotErrors: a real group (Size 1, 16 keys) whose
// Do defers the one record of each message's first call (BatchError.Defer,
// as a throttled or paused endpoint does) and returns nil on its second.
// Stats, /metrics and /stats, read over HTTP, count those calls as
// deferred, none as failed: orderly_handler_calls_total has n calls
// result="ok", n result="deferred" and 0 result="error", and every Do
// call counts under exactly one result. The first 16 calls defer the first
// record of 16 lanes with nothing done yet, which the outage detector (16
// failed items over 8 lanes, 90% of those tried) would take for an outage
// were deferrals failures to it: Outages stays 0.
func TestLiveDeferredCallsAreNotErrors(t *testing.T) {
	const topic, n, keys = "admin-deferred", 64, 16
	b := startProduced(t, topic, 2, n, keys)
	type at struct {
		part int32
		off  int64
	}
	var mu sync.Mutex
	seen := map[at]bool{}
	var calls atomic.Int64
	sc := group.DefaultSarama()
	sc.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	g, err := group.New(group.Config{
		Brokers: b.Addrs(), Topics: []string{topic}, GroupID: topic, Sarama: sc, Size: 1, Num: 4,
		Logger: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)),
	}, group.Handler[*group.Message]{Do: func(ctx context.Context, batch []*group.Message) error {
		calls.Add(1)
		m := batch[0]
		mu.Lock()
		first := !seen[at{m.Partition, m.Offset}]
		seen[at{m.Partition, m.Offset}] = true
		mu.Unlock()
		if !first {
			return nil
		}
		var be group.BatchError
		be.Defer(0, 50*time.Millisecond)
		return &be
	}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &live{t: t, b: b, g: g, topic: topic, base: "http://" + ln.Addr().String() + "/"}
	serveCtx, stopServe := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ServeListener(serveCtx, ln, g, Options{}) }()
	l.run()
	t.Cleanup(func() {
		if err := l.stopRun(); err != nil {
			t.Errorf("Run: %v", err)
		}
		stopServe()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})

	waitCaughtUp(t, b, topic, time.Minute)
	waitFor(t, 30*time.Second, "every record handled", func() bool { return g.Stats().Handled == n })

	s := g.Stats()
	if s.Failures != 0 || s.DeferredCalls != n || s.Batches != n {
		t.Errorf("Stats: got Failures %d, DeferredCalls %d, Batches %d; want 0, %d, %d", s.Failures, s.DeferredCalls, s.Batches, n, n)
	}
	if got, want := s.Batches+s.Failures+s.DeferredCalls, calls.Load(); got != want {
		t.Errorf("Stats: got Batches+Failures+DeferredCalls %d, want %d (the Do calls made)", got, want)
	}
	if s.Outages != 0 || s.Retries != 0 {
		t.Errorf("Stats: got Outages %d, Retries %d; want 0 and 0 (a deferral is no failure)", s.Outages, s.Retries)
	}

	scr := scrapeURL(t, l.base+"metrics")
	for _, want := range []struct {
		result string
		n      float64
	}{{"error", 0}, {"deferred", n}, {"ok", n}} {
		if got := scr.value(t, "orderly_handler_calls_total", "result="+want.result); got != want.n {
			t.Errorf(`orderly_handler_calls_total{result=%q}: got %v, want %v`, want.result, got, want.n)
		}
	}
	if got := scr.value(t, "orderly_outages_total"); got != 0 {
		t.Errorf("orderly_outages_total: got %v, want 0", got)
	}

	code, body := l.get("stats")
	if code != http.StatusOK {
		t.Fatalf("/stats: got %d %s, want 200", code, body)
	}
	var totals map[string]int64
	if err := json.Unmarshal(raw0(t, body)["totals"], &totals); err != nil {
		t.Fatalf("/stats totals: %v", err)
	}
	if totals["failures"] != 0 || totals["deferred_calls"] != n || totals["batches"] != n {
		t.Errorf("/stats totals: got failures %d, deferred_calls %d, batches %d; want 0, %d, %d",
			totals["failures"], totals["deferred_calls"], totals["batches"], n, n)
	}
}
