package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/loadgen"
)

func TestTyped(t *testing.T) {
	b, err := broker.Start(broker.Config{Topics: []string{"orders"}, Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = loadgen.Produce(ctx, b.Addrs(), "orders", 300, func(i int) loadgen.Record {
		if i == 17 {
			return loadgen.Record{Value: []byte("not json")} // skipped past, not fatal
		}
		return loadgen.Record{Value: fmt.Appendf(nil, `{"customer":"c%d","item":"i%d","cents":%d}`, i%7, i, 100+i)}
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, []string{"--brokers", b.Addrs()[0], "--topic", "orders"}) }()
	for {
		if b.CaughtUp("example-typed", "orders") {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v", err)
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			t.Fatalf("committed %v, want the high watermarks %v", b.Committed("example-typed", "orders"), b.HighWatermarks("orders"))
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("run: got %v, want nil after a clean shutdown", err)
	}
}
