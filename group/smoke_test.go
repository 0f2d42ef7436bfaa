package group

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

func TestSmoke(t *testing.T) {
	b := startBroker(t, "smoke", 4)
	produceSeq(t, b, "smoke", 10000, 100)
	var n atomic.Int64
	g, err := New(Config{Brokers: b.Addrs(), Topics: []string{"smoke"}, GroupID: "g1", Size: 64, Num: 8, Ticker: 10 * time.Millisecond},
		Handler[*Message]{Do: func(ctx context.Context, batch []*Message) error {
			n.Add(int64(len(batch)))
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- g.Run(ctx) }()
	waitFor(t, 30*time.Second, "all handled", func() bool { return n.Load() >= 10000 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("stats %+v", g.Stats())
	t.Logf("committed %v hw %v", b.Committed("g1", "smoke"), b.HighWatermarks("smoke"))
}
