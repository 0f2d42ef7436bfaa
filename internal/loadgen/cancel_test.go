package loadgen

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/broker"
)

// TestProduceCancelled: a Produce cut short by its context returns the
// context's error once the producer is closed (it used to dereference a
// nil *ProducerError from the closed Errors channel and crash).
func TestProduceCancelled(t *testing.T) {
	b, err := broker.Start(broker.Config{Topics: []string{"t"}, Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = Produce(ctx, b.Addrs(), "t", 5_000_000, func(i int) Record {
		return Record{Key: []byte{byte(i)}, Value: make([]byte, 100)}
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Produce cancelled: %v, want DeadlineExceeded", err)
	}
}

// TestProduceCancelledKeepsEarlierErrors: a record that failed before the
// cancellation is reported with the context's error, not dropped.
func TestProduceCancelledKeepsEarlierErrors(t *testing.T) {
	b, err := broker.Start(broker.Config{Topics: []string{"t"}, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err = Produce(ctx, b.Addrs(), "t", 1000, func(i int) Record {
		if i == 0 { // larger than the producer's MaxMessageBytes: rejected
			return Record{Value: make([]byte, 5<<20)}
		}
		cancel()
		return Record{Value: []byte("v")}
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want it to wrap context.Canceled", err)
	}
	if err == nil || !strings.Contains(err.Error(), "MaxMessageBytes") {
		t.Errorf("got %v, want it to report the oversized record too", err)
	}
}
