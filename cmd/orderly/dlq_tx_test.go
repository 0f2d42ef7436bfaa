package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
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

// TestDlqTopicReadCommitted: a dead-letter topic is read as the consumer
// reads its topics, read-committed. A record of an aborted transaction is
// not listed (nor would it be replayed), and an open transaction holds the
// read back at its first offset, with a warning naming the partition and
// the offsets held back, as Kafka's last stable offset does for a
// consumer. The read before listed all five records, the aborted and the
// uncommitted ones included.
func TestDlqTopicReadCommitted(t *testing.T) {
	f := newDlqFixture(t)
	const topic = "tx-dlq"
	if err := f.b.CreateTopic(topic, 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	record := func(c dlqCase) *kgo.Record {
		r := c.dead()
		rec := &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
		for _, h := range r.Headers {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: string(h.Key), Value: h.Value})
		}
		return rec
	}
	client := func(opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(f.addr)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	produce := func(cl *kgo.Client, c dlqCase) {
		t.Helper()
		if err := cl.ProduceSync(ctx, record(c)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	tx := func(cl *kgo.Client, c dlqCase, end *kgo.TransactionEndTry) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produce(cl, c)
		if end != nil {
			if err := cl.EndTransaction(ctx, *end); err != nil {
				t.Fatal(err)
			}
		}
	}
	commit, abort := kgo.TryCommit, kgo.TryAbort
	// Offsets: 0 committed (1 its marker), 2 aborted (3 its marker), 4
	// plain, 5 in a transaction left open, 6 plain behind it.
	txs, plain := client(kgo.TransactionalID("dlq-rc-1"), kgo.DefaultProduceTopic(topic)), client(kgo.DefaultProduceTopic(topic))
	tx(txs, f.cases[0], &commit)
	tx(txs, f.cases[4], &abort)
	produce(plain, f.cases[1])
	tx(client(kgo.TransactionalID("dlq-rc-2"), kgo.DefaultProduceTopic(topic)), f.cases[2], nil)
	produce(plain, f.cases[3])
	if hw := f.b.HighWatermarks(topic)[0]; hw != 7 {
		t.Fatalf("%s high watermark: got %d, want 7", topic, hw)
	}

	out, stderr, err := runCmd2(ctx, "dlq", "list", "--brokers", f.addr, "--topic", topic, "--json")
	if err != nil {
		t.Fatalf("dlq list: %v\nstderr:\n%s", err, stderr)
	}
	var got []string
	for _, e := range jsonLines[entryJSON](t, out) {
		if e.DLQOffset == nil {
			t.Fatalf("dlq list --json: no dlq_offset in %+v", e)
		}
		got = append(got, fmt.Sprintf("%d:%s@%d", *e.DLQOffset, e.Reason, e.Offset))
	}
	want := []string{
		fmt.Sprintf("0:%s@%d", f.cases[0].info.Reason, f.cases[0].info.Offset),
		fmt.Sprintf("4:%s@%d", f.cases[1].info.Reason, f.cases[1].info.Offset),
	}
	if !slices.Equal(got, want) {
		t.Errorf("dlq list of a topic with an aborted and an open transaction: got %v, want %v (dlq offset:reason@origin offset)", got, want)
	}
	if w := "tx-dlq/0: a transaction open since offset 5 holds back offsets 5 to 6"; !strings.Contains(stderr, w) {
		t.Errorf("stderr does not say %q:\n%s", w, stderr)
	}

	// A partition that ends in an aborted transaction has no record for
	// the list at its end, only the abort marker: the read ends there.
	const ends = "tx-abort-end"
	if err := f.b.CreateTopic(ends, 1); err != nil {
		t.Fatal(err)
	}
	txe := client(kgo.TransactionalID("dlq-rc-3"), kgo.DefaultProduceTopic(ends))
	tx(txe, f.cases[0], &commit)
	tx(txe, f.cases[4], &abort)
	out, stderr, err = runCmd2(ctx, "dlq", "list", "--brokers", f.addr, "--topic", ends, "--json")
	if err != nil {
		t.Fatalf("dlq list of a topic ending in an aborted transaction: %v\nstderr:\n%s", err, stderr)
	}
	if got := jsonLines[entryJSON](t, out); len(got) != 1 || got[0].Offset != f.cases[0].info.Offset {
		t.Errorf("dlq list of a topic ending in an aborted transaction: got %+v, want the committed dead letter of origin offset %d", got, f.cases[0].info.Offset)
	}
}
