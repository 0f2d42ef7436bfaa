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
	err = b.WaitCaughtUp(ctx, "example-basic", "events", func(ctx context.Context) error {
		return run(ctx, []string{"--brokers", b.Addrs()[0], "--topic", "events"})
	})
	if err != nil {
		t.Fatalf("run: got %v, want nil after catching up and a clean shutdown", err)
	}
}
