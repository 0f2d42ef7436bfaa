package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/loadgen"
)

// ValueSize is the size of a produced message value unless the data set
// says otherwise (dataSpec.Value).
const ValueSize = 100

// dataSpec describes a data set: Messages records of Value bytes (0:
// ValueSize) whose keys are drawn from Keys keys, uniformly or Zipf(Zipf)
// when Zipf > 0.
type dataSpec struct {
	Messages   int
	Partitions int
	Keys       int
	Zipf       float64
	Value      int
}

// valueSize is the size of the data set's values.
func (d dataSpec) valueSize() int {
	if d.Value > 0 {
		return d.Value
	}
	return ValueSize
}

func (d dataSpec) topic() string {
	dist := "uniform"
	if d.Zipf > 0 {
		dist = fmt.Sprintf("zipf%g", d.Zipf)
	}
	t := fmt.Sprintf("bench-%s-n%d-p%d-k%d", dist, d.Messages, d.Partitions, d.Keys)
	if d.valueSize() != ValueSize {
		t += fmt.Sprintf("-v%d", d.valueSize())
	}
	return t
}

// dataset is a produced data set.
type dataset struct {
	dataSpec
	Topic    string
	HotKey   string // the key with the most messages
	HotCount int    // how many messages it has
	Produced time.Duration
}

// HotShare is the hottest key's share of the messages.
func (d *dataset) HotShare() float64 {
	if d.Messages == 0 {
		return 0
	}
	return float64(d.HotCount) / float64(d.Messages)
}

// KeyOrderCap is the most msg/s strict key order allows when each message
// costs perMsg one after another: the hottest key's messages alone take
// HotCount*perMsg.
func (d *dataset) KeyOrderCap(perMsg time.Duration) float64 {
	if d.HotCount == 0 || perMsg <= 0 {
		return 0
	}
	return float64(d.Messages) / (float64(d.HotCount) * perMsg.Seconds())
}

// produce creates the topic and writes the data set, counting the keys as
// they are produced.
func produce(ctx context.Context, b *broker.Broker, spec dataSpec) (*dataset, error) {
	ds := &dataset{dataSpec: spec, Topic: spec.topic()}
	if err := b.CreateTopic(ds.Topic, int32(spec.Partitions)); err != nil {
		return nil, err
	}
	if spec.valueSize() > ValueSize {
		// The producer batches up to 4 MiB per partition; kfake, like
		// Kafka, refuses batches above max.message.bytes (1 MiB).
		if err := setTopicConfig(ctx, b.Addrs(), ds.Topic, "max.message.bytes", "16777216"); err != nil {
			return nil, err
		}
	}
	var keys loadgen.Keys
	if spec.Zipf > 0 {
		keys = loadgen.NewZipf(spec.Keys, spec.Zipf, 1)
	} else {
		keys = loadgen.NewUniform(spec.Keys, 1)
	}
	counts := make([]int, spec.Keys)
	gen := func(i int) loadgen.Record {
		k := keys.Next()
		counts[k]++
		v := make([]byte, spec.valueSize())
		for j := range v {
			v[j] = byte('a' + (i+j)%26)
		}
		return loadgen.Record{Key: keyBytes(k), Value: v}
	}
	start := time.Now()
	if err := loadgen.Produce(ctx, b.Addrs(), ds.Topic, spec.Messages, gen); err != nil {
		return nil, fmt.Errorf("produce %d messages to %s: %w", spec.Messages, ds.Topic, err)
	}
	ds.Produced = time.Since(start)
	ds.HotCount = slices.Max(counts)
	ds.HotKey = string(keyBytes(slices.Index(counts, ds.HotCount)))
	var total int64
	for _, hw := range b.HighWatermarks(ds.Topic) {
		total += hw
	}
	if total != int64(spec.Messages) {
		return nil, fmt.Errorf("produce to %s: the topic holds %d messages, want %d", ds.Topic, total, spec.Messages)
	}
	return ds, nil
}

func keyBytes(k int) []byte { return fmt.Appendf(nil, "key-%05d", k) }

// setTopicConfig sets one config of topic with an IncrementalAlterConfigs
// request.
func setTopicConfig(ctx context.Context, addrs []string, topic, name, value string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return fmt.Errorf("set %s of %s: %w", name, topic, err)
	}
	defer cl.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeTopic
	res.ResourceName = topic
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name, cfg.Value, cfg.Op = name, kmsg.StringPtr(value), kmsg.IncrementalAlterConfigOpSet
	res.Configs = append(res.Configs, cfg)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		for _, r := range resp.Resources {
			if err = kerr.ErrorForCode(r.ErrorCode); err != nil {
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("set %s=%s of %s: %w", name, value, topic, err)
	}
	return nil
}
