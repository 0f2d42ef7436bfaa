package group

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestOffsetNewestCommitsNothingUnreceived: a new group starting at
// OffsetNewest. sarama reads the high watermark when it opens the
// partition (10 here), and records produced after that (5) are on their
// way to the claim. While its fetches find nothing, the claim's own read
// of the high watermark (checkReset) finds 15; the group must not commit
// 15, past the 5 records it has not received, or a member that died then
// would leave them to nobody. Once the fetches find them, it handles all
// 5 and commits 15.
func TestOffsetNewestCommitsNothingUnreceived(t *testing.T) {
	t.Parallel() // waits on the broker mostly
	const topic = "newest"
	b := startBroker(t, topic, 1)
	produceSeq(t, b, topic, 10, 1)
	c := b.Cluster()

	var newestReads atomic.Int32 // ListOffsets for the latest offset
	checked := make(chan struct{})
	produced := make(chan struct{})
	c.ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r, ok := req.(*kmsg.ListOffsetsRequest)
		if !ok || len(r.Topics) == 0 || len(r.Topics[0].Partitions) == 0 || r.Topics[0].Partitions[0].Timestamp != -1 {
			return nil, nil, false
		}
		if newestReads.Add(1) == 2 { // the first is sarama's, opening the partition; the second the claim's
			close(checked)
			c.SleepControl(func() { <-produced })
		}
		return nil, nil, false
	})
	// The claim's first fetches find nothing while holding (an empty
	// answer, not a held one: sarama's commits share the connection).
	var holding atomic.Bool
	holding.Store(true)
	var hw atomic.Int64
	hw.Store(10)
	c.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r, ok := req.(*kmsg.FetchRequest)
		if !ok || !holding.Load() {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.FetchResponse)
		resp.SetVersion(r.GetVersion())
		for _, rt := range r.Topics {
			t := kmsg.NewFetchResponseTopic()
			t.Topic, t.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				p := kmsg.NewFetchResponseTopicPartition()
				p.Partition, p.HighWatermark, p.LastStableOffset, p.LogStartOffset = rp.Partition, hw.Load(), hw.Load(), 0
				t.Partitions = append(t.Partitions, p)
			}
			resp.Topics = append(resp.Topics, t)
		}
		return resp, nil, true
	})
	var mu sync.Mutex
	var commits []int64
	b.ObserveCommits(func(req *kmsg.OffsetCommitRequest) {
		for _, tp := range req.Topics {
			for _, p := range tp.Partitions {
				mu.Lock()
				commits = append(commits, p.Offset)
				mu.Unlock()
			}
		}
	})

	cfg := fastConfig(t, b.Addrs(), topic, "newest")
	cfg.Sarama.Consumer.Offsets.Initial = sarama.OffsetNewest
	cfg.Status.ReadBack = -1
	var handled atomic.Int64
	g := newGroup(t, cfg, func(_ context.Context, batch []*Message) error {
		handled.Add(int64(len(batch)))
		return nil
	})
	stop := run(t, g)
	select {
	case <-checked:
	case <-time.After(30 * time.Second):
		t.Fatal("no claim read of the high watermark within 30s")
	}
	produceSeq(t, b, topic, 5, 1)
	hw.Store(15)
	close(produced)
	time.Sleep(10 * cfg.Sarama.Consumer.Offsets.AutoCommit.Interval) // commit ticks while nothing was received
	mu.Lock()
	early := append([]int64(nil), commits...)
	mu.Unlock()
	for _, off := range early {
		if off > 10 {
			t.Fatalf("commits while the 5 records after offset 10 were not received: got %v, want none above 10", early)
		}
	}
	holding.Store(false)
	waitFor(t, 30*time.Second, "the 5 records handled and committed", func() bool {
		return handled.Load() == 5 && b.Committed(cfg.GroupID, topic)[0] == 15
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("commits before the fetch went on: %v", early)
}
