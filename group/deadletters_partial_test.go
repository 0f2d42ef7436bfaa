package group

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/orderly-go/orderly/internal/broker"
)

// TestDeadLettersPartlyRefused: when the dead-letter topic's producer
// writes some records of a batch and has the rest refused (here the
// broker leading some of its partitions answers NOT_ENOUGH_REPLICAS for a
// while), only the refused records are produced again: each dead letter
// is in the topic once.
func TestDeadLettersPartlyRefused(t *testing.T) {
	t.Parallel() // mostly waits on the producer's timeouts
	const topic, dlq, n, poison, brokers, dlqParts = "partly", "partly-dlq", 400, 40, 2, 8
	b, err := broker.Start(broker.Config{Topics: []string{topic}, Partitions: 1, Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.CreateTopic(dlq, dlqParts); err != nil {
		t.Fatal(err)
	}
	produceSeq(t, b, topic, n, 40)
	// kfake picks each partition's leader at random: place the odd
	// partitions on the broker that does not lead partition 0 (kfake's
	// node IDs are 0 to brokers-1), so that some dead letters are written
	// beside the refused ones.
	c := b.Cluster()
	lead0 := c.LeaderFor(dlq, 0)
	for p := int32(1); p < dlqParts; p += 2 {
		if err := c.MoveTopicPartition(dlq, p, (lead0+1)%brokers); err != nil {
			t.Fatal(err)
		}
	}

	// Refuse produces to the dead-letter topic on the broker that leads
	// its partition 0, until the first refusal has been answered twice.
	client, err := sarama.NewClient(b.Addrs(), DefaultSarama())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	leader, err := client.Leader(dlq, 0)
	if err != nil {
		t.Fatal(err)
	}
	for p := int32(1); p < dlqParts; p += 2 {
		l, err := client.Leader(dlq, p)
		if err != nil {
			t.Fatalf("partition %d of %s: %v", p, dlq, err)
		}
		if l.ID() == leader.ID() {
			t.Fatalf("partition %d of %s: led by broker %d, want the other one: the move did not take", p, dlq, l.ID())
		}
	}
	var refusals atomic.Int64
	c.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.ProduceRequest)
		if c.CurrentNode() != leader.ID() || refusals.Load() >= 2 {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range r.Topics {
			if rt.Topic != dlq {
				return nil, nil, false
			}
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			for _, p := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode, sp.BaseOffset = p.Partition, kerr.NotEnoughReplicas.Code, -1
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		refusals.Add(1)
		return resp, nil, true
	})

	cfg := fastConfig(t, b.Addrs(), topic, "partly")
	cfg.Size, cfg.Num = 64, 2
	cfg.DeadLetterTopic = dlq
	cfg.Retry = Retry{Backoff: 50 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, MaxAttempts: 1}
	cfg.Sarama.Producer.Retry.Max = 0 // the producer gives up at once: the writer retries
	g := newGroup(t, cfg, func(_ context.Context, batch []*Message) error {
		var be BatchError
		for i, m := range batch {
			if m.Offset < poison {
				be.Fail(i, errors.New("poison"))
			}
		}
		return be.Err()
	})
	stop := run(t, g)
	waitFor(t, time.Minute, "every message committed", func() bool { return b.CaughtUp("partly", topic) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if refusals.Load() == 0 {
		t.Fatal("no produce was refused: the test exercised nothing")
	}
	got := map[int64]int{}
	for _, info := range readDeadLetterInfos(t, b.Addrs(), dlq) {
		got[info.Offset]++
	}
	for off := range int64(poison) {
		if got[off] != 1 {
			t.Errorf("offset %d: got %d dead letters, want 1", off, got[off])
		}
	}
	if len(got) != poison {
		t.Errorf("got dead letters of %d offsets, want %d", len(got), poison)
	}
	t.Logf("%d produce requests refused; %d dead-letter write errors retried", refusals.Load(), g.Stats().DeadLetterErrors)
}
