package main

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDlqTopicEndsInMarker: a dead-letter topic whose last offset is a
// transaction marker (a transactional producer wrote its last record) is
// read to its end: list returns, with the record. sarama's consumer drops
// the marker, so waiting for a record at the last offset hung for good.
func TestDlqTopicEndsInMarker(t *testing.T) {
	f := newDlqFixture(t)
	if err := f.b.CreateTopic("tx-dlq", 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.addr), kgo.TransactionalID("dlq-tx-test"), kgo.DefaultProduceTopic("tx-dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	c := f.cases[0]
	r := c.dead()
	rec := &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
	for _, h := range r.Headers {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: string(h.Key), Value: h.Value})
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if hw := f.b.HighWatermarks("tx-dlq")[0]; hw != 2 {
		t.Fatalf("tx-dlq high watermark: got %d, want 2 (the record and the commit marker)", hw)
	}
	out, stderr, err := runCmd2(ctx, "dlq", "list", "--brokers", f.addr, "--topic", "tx-dlq", "--json")
	if err != nil {
		t.Fatalf("dlq list of a topic ending in a marker: %v\nstderr:\n%s", err, stderr)
	}
	got := jsonLines[entryJSON](t, out)
	if len(got) != 1 || got[0].Offset != c.info.Offset || got[0].Reason != c.info.Reason {
		t.Fatalf("dlq list: got %+v, want the one dead letter (origin offset %d, %s)", got, c.info.Offset, c.info.Reason)
	}
}
