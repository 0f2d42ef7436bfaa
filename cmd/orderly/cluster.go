package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/internal/broker"
)

// cluster is what the demo needs of the Kafka cluster besides producing and
// consuming: the embedded kfake broker, or a real cluster (--brokers) seen
// through sarama's client and ClusterAdmin.
type cluster interface {
	// addrs are the bootstrap addresses for producers and consumers.
	addrs() []string
	// ensureTopic creates topic with partitions partitions unless it
	// exists, and returns its partition count.
	ensureTopic(topic string, partitions int32) (int32, error)
	// highWatermarks returns each partition's next offset to be written.
	highWatermarks(topic string) (map[int32]int64, error)
	// committed returns group's committed offsets for topic; partitions
	// without a commit are absent.
	committed(group, topic string) (map[int32]int64, error)
	// startAt commits offs as group's offsets for topic, so that a new
	// group starts there instead of at the oldest message.
	startAt(group, topic string, offs map[int32]int64) error
	close()
}

// embedded is an in-process kfake broker started for this demo run.
type embedded struct {
	b *broker.Broker
}

func startEmbedded() (*embedded, error) {
	b, err := broker.Start(broker.Config{})
	if err != nil {
		return nil, fmt.Errorf("start embedded broker: %w", err)
	}
	return &embedded{b: b}, nil
}

func (e *embedded) addrs() []string { return e.b.Addrs() }

func (e *embedded) ensureTopic(topic string, partitions int32) (int32, error) {
	if err := e.b.CreateTopic(topic, partitions); err != nil {
		return 0, err
	}
	return int32(len(e.b.HighWatermarks(topic))), nil
}

func (e *embedded) highWatermarks(topic string) (map[int32]int64, error) {
	return e.b.HighWatermarks(topic), nil
}

func (e *embedded) committed(group, topic string) (map[int32]int64, error) {
	return e.b.Committed(group, topic), nil
}

func (e *embedded) startAt(group, topic string, offs map[int32]int64) error {
	// The embedded broker's topic is always new: every partition starts
	// at 0, which is where a new group starts anyway.
	for p, o := range offs {
		if o != 0 {
			return fmt.Errorf("embedded broker: topic %q partition %d starts at %d, want 0", topic, p, o)
		}
	}
	return nil
}

func (e *embedded) close() { e.b.Close() }

// remote is a real cluster given with --brokers.
type remote struct {
	brokers []string
	client  sarama.Client
	admin   sarama.ClusterAdmin
}

// dialRemote connects to brokers; at is how its errors name them: the
// flag, the value and its variable (flagArg).
func dialRemote(brokers []string, at string) (*remote, error) {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_0_0_0
	cfg.ClientID = "orderly-demo-admin"
	client, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", at, err)
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("cluster admin on %s: %w", at, err)
	}
	return &remote{brokers: brokers, client: client, admin: admin}, nil
}

func (r *remote) addrs() []string { return r.brokers }

func (r *remote) ensureTopic(topic string, partitions int32) (int32, error) {
	md, err := r.admin.DescribeTopics([]string{topic})
	if err != nil {
		return 0, fmt.Errorf("describe topic %q: %w", topic, err)
	}
	if len(md) == 1 && md[0].Err == sarama.ErrNoError {
		return int32(len(md[0].Partitions)), nil
	}
	if len(md) == 1 && md[0].Err != sarama.ErrUnknownTopicOrPartition {
		return 0, fmt.Errorf("describe topic %q: %w", topic, md[0].Err)
	}
	// ReplicationFactor -1: the cluster's default.
	err = r.admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: -1}, false)
	if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return 0, fmt.Errorf("create topic %q with %d partitions: %w", topic, partitions, err)
	}
	ps, err := r.partitions(topic)
	if err != nil {
		return 0, err
	}
	return int32(len(ps)), nil
}

func (r *remote) partitions(topic string) ([]int32, error) {
	if err := r.client.RefreshMetadata(topic); err != nil {
		return nil, fmt.Errorf("metadata for topic %q: %w", topic, err)
	}
	ps, err := r.client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("partitions of topic %q: %w", topic, err)
	}
	return ps, nil
}

func (r *remote) highWatermarks(topic string) (map[int32]int64, error) {
	ps, err := r.partitions(topic)
	if err != nil {
		return nil, err
	}
	out := make(map[int32]int64, len(ps))
	for _, p := range ps {
		off, err := r.client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, fmt.Errorf("high watermark of %s/%d: %w", topic, p, err)
		}
		out[p] = off
	}
	return out, nil
}

func (r *remote) committed(group, topic string) (map[int32]int64, error) {
	ps, err := r.partitions(topic)
	if err != nil {
		return nil, err
	}
	resp, err := r.admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: ps})
	if err != nil {
		return nil, fmt.Errorf("committed offsets of group %q: %w", group, err)
	}
	return committedOffsets(resp, group, topic, ps)
}

// committedOffsets reads topic's partitions ps out of group's
// OffsetFetch response: a partition without a commit (offset -1) is
// absent; an error, whether or not it comes with offset -1, is returned.
func committedOffsets(resp *sarama.OffsetFetchResponse, group, topic string, ps []int32) (map[int32]int64, error) {
	if resp.Err != sarama.ErrNoError {
		return nil, fmt.Errorf("committed offsets of group %q: %w", group, resp.Err)
	}
	out := make(map[int32]int64, len(ps))
	for _, p := range ps {
		b := resp.GetBlock(topic, p)
		if b == nil {
			continue
		}
		if b.Err != sarama.ErrNoError {
			return nil, fmt.Errorf("committed offset of group %q at %s/%d: %w", group, topic, p, b.Err)
		}
		if b.Offset >= 0 {
			out[p] = b.Offset
		}
	}
	return out, nil
}

func (r *remote) startAt(group, topic string, offs map[int32]int64) error {
	if !slices.ContainsFunc(slices.Collect(maps.Values(offs)), func(o int64) bool { return o > 0 }) {
		return nil // a new group starts at the oldest offset anyway
	}
	commit := make(map[int32]sarama.OffsetAndMetadata, len(offs))
	for p, o := range offs {
		commit[p] = sarama.OffsetAndMetadata{Offset: o, LeaderEpoch: -1, Metadata: "orderly demo start"}
	}
	resp, err := r.admin.AlterConsumerGroupOffsets(group, map[string]map[int32]sarama.OffsetAndMetadata{topic: commit}, nil)
	if err != nil {
		return fmt.Errorf("set start offsets of group %q on %q: %w", group, topic, err)
	}
	for p, kerr := range resp.Errors[topic] {
		if kerr != sarama.ErrNoError {
			return fmt.Errorf("set start offset of group %q at %s/%d: %w", group, topic, p, kerr)
		}
	}
	return nil
}

func (r *remote) close() {
	r.admin.Close() // closes the client too
}
