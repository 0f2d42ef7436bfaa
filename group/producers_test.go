package group

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
)

// newKgo is a franz-go client (a real producer, another Kafka client than
// sarama) on brokers, closed at the end of the test.
func newKgo(t *testing.T, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts = append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ClientID("orderly-test-kgo")}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produceKgo produces recs synchronously and fails the test on any error.
func produceKgo(t *testing.T, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("kgo produce: %v", err)
	}
}

// transaction produces recs in one transaction and commits or aborts it.
func transaction(t *testing.T, cl *kgo.Client, commit bool, recs ...*kgo.Record) {
	t.Helper()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatalf("begin transaction: %v", err)
	}
	produceKgo(t, cl, recs...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatalf("end transaction (commit %v): %v", commit, err)
	}
}

// clusterAdmin is a sarama admin client on brokers (DeleteRecords,
// CreatePartitions, DescribeConsumerGroups), closed at the end of the
// test.
func clusterAdmin(t *testing.T, brokers []string) sarama.ClusterAdmin {
	t.Helper()
	sc := DefaultSarama()
	sc.ClientID = "orderly-test-admin"
	a, err := sarama.NewClusterAdmin(brokers, sc)
	if err != nil {
		t.Fatalf("admin client: %v", err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// deleteRecords moves the log start of topic's partitions (DeleteRecords,
// as retention would) to the given offsets.
func deleteRecords(t *testing.T, brokers []string, topic string, to map[int32]int64) {
	t.Helper()
	if err := clusterAdmin(t, brokers).DeleteRecords(topic, to); err != nil {
		t.Fatalf("DeleteRecords %s %v: %v", topic, to, err)
	}
}
