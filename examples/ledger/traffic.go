package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/loadgen"
)

// transfer is one record of the topic: an amount in cents paid into
// (positive) or out of (negative) an account. Its key is the account.
type transfer struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`

	partition int32 // where it was read from
	offset    int64
}

func decode(m *group.Message) (transfer, error) {
	var t transfer
	if err := json.Unmarshal(m.Value, &t); err != nil {
		return t, fmt.Errorf("transfer at %s/%d@%d: %w", m.Topic, m.Partition, m.Offset, err)
	}
	if t.Account == "" || string(m.Key) != t.Account {
		return t, fmt.Errorf("transfer at %s/%d@%d: account %q, key %q: want the account as the key", m.Topic, m.Partition, m.Offset, t.Account, m.Key)
	}
	t.partition, t.offset = m.Partition, m.Offset
	return t, nil
}

// plan draws n transfers over accounts accounts, each account's in the
// order produced never taking its balance below zero: a withdrawal takes
// at most what the deposits before it put in. Applied in that order,
// balances never go negative; applied in another, they can.
func plan(n, accounts int, seed uint64) []transfer {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	bal := make([]int64, accounts)
	out := make([]transfer, n)
	for i := range out {
		a := r.IntN(accounts)
		amt := 1 + r.Int64N(100_00)
		if bal[a] > 0 && r.IntN(2) == 0 {
			amt = -(1 + r.Int64N(bal[a])) // withdraw some of what is there
		}
		bal[a] += amt
		out[i] = transfer{Account: fmt.Sprintf("acct-%03d", a), Amount: amt}
	}
	return out
}

// sums is what each account's balance must be once every transfer is
// applied once, and how many transfers it has.
func sums(ts []transfer) (map[string]int64, map[string]int) {
	bal, count := map[string]int64{}, map[string]int{}
	for _, t := range ts {
		bal[t.Account] += t.Amount
		count[t.Account]++
	}
	return bal, count
}

func produce(ctx context.Context, brokers []string, topic string, ts []transfer) error {
	return loadgen.Produce(ctx, brokers, topic, len(ts), func(i int) loadgen.Record {
		v, _ := json.Marshal(ts[i]) // two plain fields
		return loadgen.Record{Key: []byte(ts[i].Account), Value: v}
	})
}

// offsets reads the topic's high watermarks and the group's committed
// offsets through the Kafka protocol (ListOffsets, OffsetFetch).
type offsets struct {
	client sarama.Client
	admin  sarama.ClusterAdmin
}

func newOffsets(brokers []string) (*offsets, error) {
	cfg := group.DefaultSarama()
	cfg.ClientID = "ledger-offsets"
	client, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %v: %w", brokers, err)
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("cluster admin on %v: %w", brokers, err)
	}
	return &offsets{client: client, admin: admin}, nil
}

func (o *offsets) close() { o.admin.Close() }

// checkTopic fails, saying so, if topic does not exist on the cluster at
// brokers (the ledger creates its topic only on the embedded broker), or,
// with needRecords, if it holds no records (each partition's log start is
// its high watermark): without --produce the ledger would consume
// nothing, and find no balance to match the transfers it drew.
func checkTopic(brokers []string, topic string, needRecords bool, transfers int) error {
	off, err := newOffsets(brokers)
	if err != nil {
		return err
	}
	defer off.close()
	hw, err := off.highWatermarks(topic)
	if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return fmt.Errorf("topic %q does not exist on %s: create it first (the ledger creates its topic only on the embedded broker, without --brokers)", topic, strings.Join(brokers, ","))
	}
	if err != nil || !needRecords {
		return err
	}
	for p, high := range hw {
		low, err := off.client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return fmt.Errorf("log start offset of %s/%d: %w", topic, p, err)
		}
		if low < high {
			return nil
		}
	}
	return fmt.Errorf("topic %q on %s holds no records: give --produce to write the %d transfers to it first", topic, strings.Join(brokers, ","), transfers)
}

// highWatermarks of topic, by partition.
func (o *offsets) highWatermarks(topic string) (map[int32]int64, error) {
	if err := o.client.RefreshMetadata(topic); err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	ps, err := o.client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("partitions of %s: %w", topic, err)
	}
	hw := make(map[int32]int64, len(ps))
	for _, p := range ps {
		if hw[p], err = o.client.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
			return nil, fmt.Errorf("high watermark of %s/%d: %w", topic, p, err)
		}
	}
	return hw, nil
}

// caughtUp reports whether groupID has committed every partition of topic
// up to target.
func (o *offsets) caughtUp(groupID, topic string, target map[int32]int64) (bool, error) {
	ps := make([]int32, 0, len(target))
	for p := range target {
		ps = append(ps, p)
	}
	resp, err := o.admin.ListConsumerGroupOffsets(groupID, map[string][]int32{topic: ps})
	if err == nil && resp.Err != sarama.ErrNoError {
		err = resp.Err
	}
	switch {
	case errors.Is(err, sarama.ErrGroupIDNotFound):
		return false, nil // the group has not joined yet
	case err != nil:
		return false, fmt.Errorf("committed offsets of %s on %s: %w", groupID, topic, err)
	}
	for p, hw := range target {
		b := resp.GetBlock(topic, p)
		if hw > 0 && (b == nil || b.Offset < hw) {
			return false, nil
		}
	}
	return true, nil
}
