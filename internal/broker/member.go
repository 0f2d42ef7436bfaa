package broker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// RangeMember is a consumer group member of another client: franz-go with
// the range balancer (what a Java or librdkafka consumer offers by
// default, or close to it), polling without committing. Tests use it as
// the member a group moving to Orderly already has.
type RangeMember struct {
	cl     *kgo.Client
	held   atomic.Int32
	cancel context.CancelFunc
	polled chan struct{}
	once   sync.Once
}

// JoinRange starts a RangeMember of group, subscribed to topic.
func (b *Broker) JoinRange(group, topic string) (*RangeMember, error) {
	m := &RangeMember{polled: make(chan struct{})}
	count := func(d int32) func(context.Context, *kgo.Client, map[string][]int32) {
		return func(_ context.Context, _ *kgo.Client, a map[string][]int32) { m.held.Add(d * int32(len(a[topic]))) }
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.Balancers(kgo.RangeBalancer()), kgo.DisableAutoCommit(), kgo.SessionTimeout(6*time.Second),
		kgo.OnPartitionsAssigned(count(1)), kgo.OnPartitionsRevoked(count(-1)), kgo.OnPartitionsLost(count(-1)))
	if err != nil {
		return nil, fmt.Errorf("range member of group %s: %w", group, err)
	}
	m.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() {
		defer close(m.polled)
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	}()
	return m, nil
}

// Held is how many partitions of its topic the member holds now.
func (m *RangeMember) Held() int { return int(m.held.Load()) }

// Leave stops polling and closes the client, leaving the group
// (LeaveGroup). It may be called more than once.
func (m *RangeMember) Leave() {
	m.once.Do(func() {
		m.cancel()
		<-m.polled
		m.cl.Close()
	})
}
