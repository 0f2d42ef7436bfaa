package group

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/loadgen"
)

// startBroker starts an in-process kfake broker with topic and closes it at
// the end of the test.
func startBroker(t *testing.T, topic string, partitions int32) *broker.Broker {
	t.Helper()
	b, err := broker.Start(broker.Config{Topics: []string{topic}, Partitions: partitions})
	if err != nil {
		t.Fatalf("start broker: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}

// produceSeq produces n messages over keys keys; each value carries the
// key's sequence number so the ledger can check per-key order.
func produceSeq(t *testing.T, b *broker.Broker, topic string, n, keys int) {
	t.Helper()
	seq := make([]uint64, keys)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := loadgen.Produce(ctx, b.Addrs(), topic, n, func(i int) loadgen.Record {
		k := i % keys
		v := make([]byte, 16)
		binary.BigEndian.PutUint64(v, uint64(k))
		binary.BigEndian.PutUint64(v[8:], seq[k])
		seq[k]++
		return loadgen.Record{Key: fmt.Appendf(nil, "key-%d", k), Value: v}
	})
	if err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// newGroup is New for a *Message handler whose config is known to be
// valid.
func newGroup(t testing.TB, cfg Config, do func(context.Context, []*Message) error) *Group[*Message] {
	t.Helper()
	g, err := New(cfg, Handler[*Message]{Do: do})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// offlineGroup is a Group of a minimal valid Config, edited by edit, and a
// Do that does nothing: for what New derives from a Config (New connects
// to nothing; the group is never run).
func offlineGroup(t testing.TB, edit func(c *Config)) *Group[*Message] {
	t.Helper()
	cfg := Config{Brokers: []string{"localhost:9092"}, Topics: []string{"t"}, GroupID: "g"}
	edit(&cfg)
	return newGroup(t, cfg, func(context.Context, []*Message) error { return nil })
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startWorkers starts g's workers and failure path without a broker (for
// tests that drive claims by hand); the returned stop ends them and fails
// the test if the failure path could not close.
func startWorkers[T any](tb testing.TB, g *Group[T]) (stop func()) {
	tb.Helper()
	stopWorkers, err := g.startWorkers(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return func() {
		if err := stopWorkers(); err != nil {
			tb.Error(err)
		}
	}
}
