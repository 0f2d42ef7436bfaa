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
	err = b.WaitCaughtUp(ctx, "example-typed", "orders", func(ctx context.Context) error {
		return run(ctx, []string{"--brokers", b.Addrs()[0], "--topic", "orders"})
	})
	if err != nil {
		t.Fatalf("run: got %v, want nil after catching up and a clean shutdown", err)
	}
}
