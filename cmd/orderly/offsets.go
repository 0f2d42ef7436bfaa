package main

import (
	"fmt"

	"github.com/IBM/sarama"
)

// listOffsets lists the partitions' end offsets, one ListOffsets request
// per leader: read-uncommitted, the high watermarks (group describe's
// lag); read-committed, the last stable offsets (the first offset of the
// oldest transaction still open, else the high watermark: what dlq may
// purge). sarama's GetOffset asks read-uncommitted only.
func listOffsets(client sarama.Client, parts map[string][]int32, level sarama.IsolationLevel) (map[topicPart]int64, error) {
	what := "high watermark"
	if level == sarama.ReadCommitted {
		what = "last stable offset"
	}
	type leaderReq struct {
		b   *sarama.Broker
		req *sarama.OffsetRequest
		tps []topicPart
	}
	byLeader := map[int32]*leaderReq{}
	for topic, ps := range parts {
		for _, p := range ps {
			b, err := client.Leader(topic, p)
			if err != nil {
				return nil, fmt.Errorf("leader of %s/%d: %w", topic, p, err)
			}
			lr := byLeader[b.ID()]
			if lr == nil {
				lr = &leaderReq{b: b, req: sarama.NewOffsetRequest(groupSarama().Version)}
				lr.req.IsolationLevel = level
				byLeader[b.ID()] = lr
			}
			lr.req.AddBlock(topic, p, sarama.OffsetNewest, 1)
			lr.tps = append(lr.tps, topicPart{topic, p})
		}
	}
	out := make(map[topicPart]int64)
	for _, lr := range byLeader {
		resp, err := lr.b.GetAvailableOffsets(lr.req)
		if err != nil {
			return nil, fmt.Errorf("%ss from broker %d (%s): %w", what, lr.b.ID(), lr.b.Addr(), err)
		}
		for _, tp := range lr.tps {
			block := resp.GetBlock(tp.topic, tp.part)
			switch {
			case block == nil || len(block.Offsets) == 0:
				return nil, fmt.Errorf("%s of %s/%d: broker %d did not answer for it", what, tp.topic, tp.part, lr.b.ID())
			case block.Err != sarama.ErrNoError:
				return nil, fmt.Errorf("%s of %s/%d: %w", what, tp.topic, tp.part, block.Err)
			}
			out[tp] = block.Offsets[0] // every version fills Offsets
		}
	}
	return out, nil
}
