// Package endoffsets lists partitions' end offsets with one ListOffsets
// request per leader, for the group's read-back and the CLI's describe
// and purge. sarama's Client.GetOffset asks one partition at a time, and
// read-uncommitted only.
package endoffsets

import (
	"errors"
	"fmt"

	"github.com/IBM/sarama"
)

// Partition is a topic's partition: the key of List's answer.
type Partition struct {
	Topic string
	Part  int32
}

// List asks each partition's leader for its end offset, one ListOffsets
// request (of version's) per leader: read-uncommitted, the high
// watermark; read-committed, the last stable offset (the first offset of
// the oldest transaction still open, else the high watermark). It returns
// what it could list and, joined, an error per partition or broker that
// did not answer, each naming it.
func List(client sarama.Client, version sarama.KafkaVersion, parts map[string][]int32, level sarama.IsolationLevel) (map[Partition]int64, error) {
	what := "high watermark"
	if level == sarama.ReadCommitted {
		what = "last stable offset"
	}
	type leaderReq struct {
		b   *sarama.Broker
		req *sarama.OffsetRequest
		tps []Partition
	}
	byLeader := map[int32]*leaderReq{}
	var errs []error
	for topic, ps := range parts {
		for _, p := range ps {
			b, err := client.Leader(topic, p)
			if err != nil {
				errs = append(errs, fmt.Errorf("leader of %s/%d: %w", topic, p, err))
				continue
			}
			lr := byLeader[b.ID()]
			if lr == nil {
				lr = &leaderReq{b: b, req: sarama.NewOffsetRequest(version)}
				lr.req.IsolationLevel = level
				byLeader[b.ID()] = lr
			}
			lr.req.AddBlock(topic, p, sarama.OffsetNewest, 1)
			lr.tps = append(lr.tps, Partition{topic, p})
		}
	}
	out := make(map[Partition]int64)
	for _, lr := range byLeader {
		resp, err := lr.b.GetAvailableOffsets(lr.req)
		if err != nil {
			errs = append(errs, fmt.Errorf("%ss from broker %d (%s): %w", what, lr.b.ID(), lr.b.Addr(), err))
			continue
		}
		for _, tp := range lr.tps {
			switch block := resp.GetBlock(tp.Topic, tp.Part); {
			case block == nil || len(block.Offsets) == 0:
				errs = append(errs, fmt.Errorf("%s of %s/%d: broker %d did not answer for it", what, tp.Topic, tp.Part, lr.b.ID()))
			case block.Err != sarama.ErrNoError:
				errs = append(errs, fmt.Errorf("%s of %s/%d: %w", what, tp.Topic, tp.Part, block.Err))
			default:
				out[tp] = block.Offsets[0] // every version fills Offsets
			}
		}
	}
	return out, errors.Join(errs...)
}
