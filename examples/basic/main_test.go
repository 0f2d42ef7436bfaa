package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/loadgen"
)

func TestBasic(t *testing.T) {
	b, err := broker.Start(broker.Config{Topics: []string{"events"}, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = loadgen.Produce(ctx, b.Addrs(), "events", 50, func(i int) loadgen.Record {
		return loadgen.Record{Key: fmt.Appendf(nil, "k%d", i%5), Value: fmt.Appendf(nil, "v%d", i)}
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, []string{"--brokers", b.Addrs()[0], "--topic", "events"}) }()
	for {
		if b.CaughtUp("example-basic", "events") {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v", err)
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			t.Fatalf("committed %v, want the high watermarks %v", b.Committed("example-basic", "events"), b.HighWatermarks("events"))
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("run: got %v, want nil after a clean shutdown", err)
	}
}
