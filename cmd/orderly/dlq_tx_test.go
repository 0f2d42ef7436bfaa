package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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
	c := f.cases[0]
	newTxProducer(ctx, t, f.addr, "tx-dlq", "dlq-tx-test").commit(c)
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
	// Offsets: 0 committed (1 its marker), 2 aborted (3 its marker), 4
	// plain, 5 in a transaction left open, 6 plain behind it.
	txs, plain := newTxProducer(ctx, t, f.addr, topic, "dlq-rc-1"), newTxProducer(ctx, t, f.addr, topic, "")
	txs.commit(f.cases[0])
	txs.abort(f.cases[4])
	plain.produce(f.cases[1])
	newTxProducer(ctx, t, f.addr, topic, "dlq-rc-2").begin(f.cases[2])
	plain.produce(f.cases[3])
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
	if w := "tx-dlq/0: offsets 5 to 6 not read: a transaction open since offset 5 holds them back (1 committed record among them)"; !strings.Contains(stderr, w) {
		t.Errorf("stderr does not say %q:\n%s", w, stderr)
	}
	// replay publishes the same two, whole: the committed transaction's
	// record passed on at its marker, and the plain one. (Replay keeps
	// what it read until it publishes: a record passed on at a marker
	// was once published empty.)
	if err := f.b.CreateTopic("tx-replayed", 1); err != nil {
		t.Fatal(err)
	}
	dlqRun(t, "replay", "--brokers", f.addr, "--topic", topic, "--to", "tx-replayed")
	var values []string
	for _, r := range consumed(t, f.addr, "tx-replayed", 0, 0) {
		values = append(values, string(r.Key)+"="+string(r.Value))
	}
	if want := []string{string(f.cases[0].rec.Key) + "=" + string(f.cases[0].rec.Value), string(f.cases[1].rec.Key) + "=" + string(f.cases[1].rec.Value)}; !slices.Equal(values, want) {
		t.Errorf("replay --to tx-replayed: got %q, want %q", values, want)
	}

	// A partition that ends in an aborted transaction has no record for
	// the list at its end, only the abort marker: the read ends there.
	const ends = "tx-abort-end"
	if err := f.b.CreateTopic(ends, 1); err != nil {
		t.Fatal(err)
	}
	txe := newTxProducer(ctx, t, f.addr, ends, "dlq-rc-3")
	txe.commit(f.cases[0])
	txe.abort(f.cases[4])
	out, stderr, err = runCmd2(ctx, "dlq", "list", "--brokers", f.addr, "--topic", ends, "--json")
	if err != nil {
		t.Fatalf("dlq list of a topic ending in an aborted transaction: %v\nstderr:\n%s", err, stderr)
	}
	if got := jsonLines[entryJSON](t, out); len(got) != 1 || got[0].Offset != f.cases[0].info.Offset {
		t.Errorf("dlq list of a topic ending in an aborted transaction: got %+v, want the committed dead letter of origin offset %d", got, f.cases[0].info.Offset)
	}

	// Two producers' transactions interleaved: A's record at 0, B's at 1,
	// A aborts (its marker at 2), B stays open. What a read-committed
	// consumer sees of it ends before B's record, at an aborted record
	// whose marker lies beyond: read committed to the last stable offset,
	// nothing says that end was reached, and the list waited for B.
	const mixed = "tx-interleaved"
	if err := f.b.CreateTopic(mixed, 1); err != nil {
		t.Fatal(err)
	}
	a, b := newTxProducer(ctx, t, f.addr, mixed, "dlq-rc-a"), newTxProducer(ctx, t, f.addr, mixed, "dlq-rc-b")
	a.begin(f.cases[0])
	b.begin(f.cases[1])
	a.end(kgo.TryAbort)
	short, cancelShort := context.WithTimeout(ctx, 10*time.Second)
	defer cancelShort()
	out, stderr, err = runCmd2(short, "dlq", "list", "--brokers", f.addr, "--topic", mixed, "--json")
	if err != nil {
		t.Fatalf("dlq list of interleaved transactions, one aborted, one open: %v\nstderr:\n%s", err, stderr)
	}
	if got := jsonLines[entryJSON](t, out); len(got) != 0 {
		t.Errorf("dlq list of interleaved transactions, one aborted, one open: got %+v, want nothing", got)
	}
	if w := "tx-interleaved/0: offsets 1 to 2 not read: a transaction open since offset 1"; !strings.Contains(stderr, w) {
		t.Errorf("stderr does not say %q:\n%s", w, stderr)
	}
}

// TestDlqPurgeKeepsOpenTransaction: purge deletes a dead-letter topic up
// to its last stable offset, not its high watermark: the record of a
// transaction still open, which list does not show yet, is kept, and is
// listed once the transaction commits. --before past the last stable
// offset is refused, naming it. The purge before deleted up to the high
// watermark, and the committed dead letter was gone.
func TestDlqPurgeKeepsOpenTransaction(t *testing.T) {
	f := newDlqFixture(t)
	const topic = "tx-purge"
	if err := f.b.CreateTopic(topic, 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := newTxProducer(ctx, t, f.addr, topic, "dlq-purge-open")
	// Offsets: 0 in a transaction open until below, 1 committed (2 its
	// marker).
	open.begin(f.cases[0])
	newTxProducer(ctx, t, f.addr, topic, "dlq-purge-done").commit(f.cases[1])
	if hw := f.b.HighWatermarks(topic)[0]; hw != 3 {
		t.Fatalf("%s high watermark: got %d, want 3", topic, hw)
	}
	kafka := []string{"--brokers", f.addr, "--topic", topic}
	_, _, err := runCmd2(ctx, slices.Concat([]string{"dlq", "purge", "--yes", "--partition", "0", "--before", "2"}, kafka)...)
	if want := "--before 2 is past the end of tx-purge/0: its last stable offset is 0"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("purge --before past the last stable offset: got %v, want an error saying %q", err, want)
	}
	out := dlqRun(t, slices.Concat([]string{"purge", "--yes"}, kafka)...)
	if want := "tx-purge/0: nothing to delete (log starts at 0; offsets 0 to 2, of a transaction still open, are kept)"; !strings.Contains(out, want) {
		t.Errorf("purge with a transaction open: got\n%s\nwant %q", out, want)
	}
	open.end(kgo.TryCommit)
	out = dlqRun(t, slices.Concat([]string{"list", "--json"}, kafka)...)
	if got := jsonLines[entryJSON](t, out); len(got) != 2 || got[0].Offset != f.cases[0].info.Offset {
		t.Errorf("list once the transaction committed: got %+v, want its dead letter (origin offset %d) and the other", got, f.cases[0].info.Offset)
	}
}

// txProducer writes dead letters to a topic, in transactions unless its
// transactional ID is "", partitioned by key unless more options say
// otherwise.
type txProducer struct {
	t   *testing.T
	ctx context.Context
	cl  *kgo.Client
}

func newTxProducer(ctx context.Context, t *testing.T, addr, topic, id string, more ...kgo.Opt) *txProducer {
	t.Helper()
	opts := append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic)}, more...)
	if id != "" {
		opts = append(opts, kgo.TransactionalID(id))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &txProducer{t: t, ctx: ctx, cl: cl}
}

// begin starts a transaction and writes c's dead letter in it.
func (p *txProducer) begin(c dlqCase) {
	p.t.Helper()
	if err := p.cl.BeginTransaction(); err != nil {
		p.t.Fatal(err)
	}
	p.produce(c)
}

// produce writes c's dead letter (in the open transaction, if any).
func (p *txProducer) produce(c dlqCase) {
	p.t.Helper()
	r := c.dead()
	rec := &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
	for _, h := range r.Headers {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: string(h.Key), Value: h.Value})
	}
	if err := p.cl.ProduceSync(p.ctx, rec).FirstErr(); err != nil {
		p.t.Fatal(err)
	}
}

// end ends the transaction begin started.
func (p *txProducer) end(how kgo.TransactionEndTry) {
	p.t.Helper()
	if err := p.cl.EndTransaction(p.ctx, how); err != nil {
		p.t.Fatal(err)
	}
}

// commit writes c's dead letter in a transaction of its own, committed.
func (p *txProducer) commit(c dlqCase) {
	p.t.Helper()
	p.begin(c)
	p.end(kgo.TryCommit)
}

// abort writes c's dead letter in a transaction of its own, aborted.
func (p *txProducer) abort(c dlqCase) {
	p.t.Helper()
	p.begin(c)
	p.end(kgo.TryAbort)
}

// TestDlqReadWhileRecordsDeleted: records deleted while a dead-letter
// topic is read (a purge, retention) end the read with an error that says
// so, instead of going on from the new log start. Reading on skipped a
// transaction's marker: the same producer's next commit then passed on
// its aborted record, or a committed one held back everything after it,
// and a partition deleted whole left the read waiting for good.
func TestDlqReadWhileRecordsDeleted(t *testing.T) {
	for _, tt := range []struct {
		name      string
		write     func(tx, plain *txProducer, cases []dlqCase)
		at, until int64 // when the read fetches at, records before until are deleted
	}{
		{"an abort marker skipped", func(tx, _ *txProducer, cs []dlqCase) {
			tx.abort(cs[0])  // 0, marker 1
			tx.commit(cs[1]) // 2, marker 3
		}, 1, 2},
		{"a commit marker skipped", func(tx, plain *txProducer, cs []dlqCase) {
			tx.commit(cs[0]) // 0, marker 1
			plain.produce(cs[1])
			plain.produce(cs[2])
		}, 1, 2},
		{"everything deleted", func(_, plain *txProducer, cs []dlqCase) {
			plain.produce(cs[0])
			plain.produce(cs[1])
		}, 0, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "dl"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			addr := c.ListenAddrs()[0]
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			plain := newTxProducer(ctx, t, addr, "dl", "")
			tt.write(newTxProducer(ctx, t, addr, "dl", "dl-tx"), plain, dlqCases(time.Now()))
			// One record batch per fetch; the fetch at tt.at waits for the
			// deletion first.
			var once sync.Once
			c.ControlKey(int16(kmsg.Fetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				req := r.(*kmsg.FetchRequest)
				for i := range req.Topics {
					for j := range req.Topics[i].Partitions {
						p := &req.Topics[i].Partitions[j]
						p.PartitionMaxBytes = 1
						if p.FetchOffset == tt.at {
							once.Do(func() { c.SleepControl(func() { deleteBefore(ctx, t, plain.cl, "dl", tt.until) }) })
						}
					}
				}
				return nil, nil, false
			})
			out, _, err := runCmd2(ctx, "dlq", "list", "--brokers", addr, "--topic", "dl", "--json")
			if want := "records were deleted while it was read"; err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("dlq list while records were deleted: got %v, want an error saying %q; listed:\n%s", err, want, out)
			}
		})
	}
}

// deleteBefore deletes topic's partition 0 records below offset before.
func deleteBefore(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, before int64) {
	req := kmsg.NewPtrDeleteRecordsRequest()
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewDeleteRecordsRequestTopicPartition()
	rp.Partition, rp.Offset = 0, before
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 5000
	resp, err := req.RequestWith(ctx, cl)
	if err == nil && resp.Topics[0].Partitions[0].ErrorCode != 0 {
		err = kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
	}
	if err != nil {
		t.Errorf("delete records of %s before %d: %v", topic, before, err)
	}
}
