package admin

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/orderly-go/orderly/group"
)

// TestLiveParkedRecordsCountHandled: a real Unordered group with a
// DataPath, whose Do fails the first attempt of every third offset, so
// that those records are parked and handled later from the parked queue.
// /metrics, read over HTTP, counts every record handled once:
// orderly_records_total{outcome="handled"} summed over the partitions is
// the topic's record count (and Stats.Handled), and outcome="parked"
// counts the records moved to the parked queue.
func TestLiveParkedRecordsCountHandled(t *testing.T) {
	const topic, n, keys = "admin-parked", 240, 24
	b := startProduced(t, topic, 2, n, keys)
	var parked int64 // offsets 0, 3, 6... of each partition
	for _, hw := range b.HighWatermarks(topic) {
		parked += (hw + 2) / 3
	}
	sc := group.DefaultSarama()
	sc.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	g, err := group.New(group.Config{
		Brokers: b.Addrs(), Topics: []string{topic}, GroupID: topic, Sarama: sc,
		Size: 10, Num: 4, Ordering: group.Unordered, DataPath: t.TempDir(),
		Retry:  group.Retry{Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond},
		Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
	}, group.Handler[*group.Message]{Do: func(ctx context.Context, batch []*group.Message) error {
		var be group.BatchError
		for i, m := range batch {
			if m.Offset%3 == 0 && m.Attempt == 1 {
				be.Fail(i, errors.New("retry me"))
			}
		}
		return be.Err()
	}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveCtx, stopServe := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ServeListener(serveCtx, ln, g, Options{}) }()
	runCtx, stopRun := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- g.Run(runCtx) }()
	t.Cleanup(func() {
		stopRun()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
		stopServe()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})

	waitCaughtUp(t, b, topic, time.Minute)
	deadline := time.Now().Add(30 * time.Second)
	for s := g.Stats(); s.Handled != n || s.Parked != 0; s = g.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("Stats: got Handled %d and Parked %d after 30s, want %d and 0", s.Handled, s.Parked, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var handled, parkedMoves float64
	deadline = time.Now().Add(10 * time.Second)
	for {
		scr := scrapeURL(t, "http://"+ln.Addr().String()+"/metrics")
		handled, parkedMoves = 0, 0
		for _, m := range scr.find("orderly_records_total", "outcome=handled") {
			handled += m.GetCounter().GetValue()
		}
		for _, m := range scr.find("orderly_records_total", "outcome=parked") {
			parkedMoves += m.GetCounter().GetValue()
		}
		if handled == n && parkedMoves == float64(parked) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if handled != n {
		t.Errorf(`orderly_records_total{outcome="handled"} summed over the partitions: got %v, want %d (Stats.Handled %d)`, handled, n, g.Stats().Handled)
	}
	if parkedMoves != float64(parked) {
		t.Errorf(`orderly_records_total{outcome="parked"} summed over the partitions: got %v, want %d`, parkedMoves, parked)
	}
}
