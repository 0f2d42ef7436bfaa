package group

import (
	"context"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/broker"
)

// BenchmarkStats1000: Stats with 1,000 claimed partitions of a running
// group (kfake, sarama), the cost of one /stats or scrape; it must stay
// cheap enough to call every second.
func BenchmarkStats1000(b *testing.B) {
	const parts = 1000
	br, err := broker.Start(broker.Config{Topics: []string{"stats"}, Partitions: parts})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	sc := DefaultSarama()
	sc.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	g, err := New(Config{Brokers: br.Addrs(), Topics: []string{"stats"}, GroupID: "stats", Sarama: sc},
		Handler[*Message]{Do: func(context.Context, []*Message) error { return nil }})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	waitFor(b, 2*time.Minute, "1000 claims", func() bool { return g.Stats().Partitions == parts })
	time.Sleep(time.Second) // a few commit intervals evaluated
	b.ReportAllocs()
	for b.Loop() {
		s := g.Stats()
		if len(s.PartitionStats) != parts {
			b.Fatalf("partitions: got %d, want %d", len(s.PartitionStats), parts)
		}
	}
}
