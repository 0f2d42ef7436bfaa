package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/loadgen"
)

// TestDlqOfAGroup: a real group dead-letters a message that always fails
// (MaxAttempts 2) into the local store under its DataPath; `orderly dlq
// list`, `show` and `replay` read it there, and the replay puts the
// original record back on its partition of the origin topic.
func TestDlqOfAGroup(t *testing.T) {
	b, err := broker.Start(broker.Config{Topics: []string{"payments"}, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const n = 50
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := loadgen.Produce(ctx, b.Addrs(), "payments", n, func(i int) loadgen.Record {
		return loadgen.Record{Key: fmt.Appendf(nil, "acct-%d", i%5), Value: fmt.Appendf(nil, "payment %d", i)}
	}); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	sc := group.DefaultSarama()
	sc.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	g, err := group.New(group.Config{
		Brokers: b.Addrs(), Topics: []string{"payments"}, GroupID: "payments", Sarama: sc,
		Size: 1, DataPath: data,
		Retry: group.Retry{Backoff: 5 * time.Millisecond, MaxBackoff: 10 * time.Millisecond, MaxAttempts: 2},
	}, group.Handler[*group.Message]{Do: func(_ context.Context, batch []*group.Message) error {
		if string(batch[0].Value) == "payment 7" {
			return errors.New("card declined")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	err = b.WaitCaughtUp(ctx, "payments", "payments", g.Run)
	if err != nil {
		t.Fatal(err)
	}
	if st := g.Stats(); st.DeadLettered.MaxAttempts != 1 {
		t.Fatalf("group dead-lettered %+v, want one after max attempts", st.DeadLettered)
	}

	out := dlqRun(t, "list", "--data", data, "--json")
	recs := jsonLines[entryJSON](t, out)
	if len(recs) != 1 || recs[0].Topic != "payments" || recs[0].Offset != 7 || recs[0].Reason != "max_attempts" || recs[0].Attempts != 2 {
		t.Fatalf("dlq list: got %s, want the one dead letter of payments/0 offset 7 after 2 attempts", out)
	}
	out = dlqRun(t, "show", "--data", data)
	for _, want := range []string{"payment 7", "acct-2", "card declined", "__orderly.errors.group", "payments"} {
		if !strings.Contains(out, want) {
			t.Fatalf("dlq show: no %q in\n%s", want, out)
		}
	}
	out = dlqRun(t, "replay", "--data", data, "--brokers", b.Addrs()[0])
	if !strings.Contains(out, "replayed 1 of 1") {
		t.Fatalf("dlq replay: %s", out)
	}
	c, err := sarama.NewConsumer(b.Addrs(), sarama.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition("payments", 0, n) // after the original records
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	select {
	case m := <-pc.Messages():
		if string(m.Value) != "payment 7" || string(m.Key) != "acct-2" || len(m.Headers) != 0 {
			t.Fatalf("replayed record: key %q value %q headers %d, want the original", m.Key, m.Value, len(m.Headers))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no replayed record on payments/0")
	}
}
