package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/internal/deadletter"
)

// entry is one dead letter as read from its source.
type entry struct {
	rec     deadletter.Record
	info    deadletter.Info
	infoErr error // the headers do not parse: not an Orderly dead letter

	// Where it is: a byte position in a local store, or a partition and
	// offset of the dead-letter topic.
	local     bool
	pos       int64
	partition int32
	offset    int64
}

// where is the entry's place in its source, for messages.
func (e *entry) where() string {
	if e.local {
		return fmt.Sprintf("store position %d", e.pos)
	}
	return fmt.Sprintf("dead-letter partition %d offset %d", e.partition, e.offset)
}

// newEntry parses r's headers.
func newEntry(r deadletter.Record) entry {
	e := entry{rec: r}
	e.info, e.infoErr = deadletter.ParseInfo(r.Headers)
	return e
}

// storeDir is the local store of a consumer whose DataPath is data.
func storeDir(data string) string { return filepath.Join(data, deadletter.DirName) }

// openStore opens the local store under --data read-only; damage is
// reported with onDamage as it is found.
func openStore(data string, onDamage func(deadletter.Damage)) (*deadletter.Store, error) {
	return deadletter.Open(storeDir(data), deadletter.Options{ReadOnly: true, OnDamage: onDamage})
}

// warnDamage returns an OnDamage that warns on warn once per damaged
// stretch: a store reports each at Open and again at every full read.
func warnDamage(warn io.Writer) func(deadletter.Damage) {
	seen := map[deadletter.Damage]bool{}
	return func(d deadletter.Damage) {
		if !seen[d] {
			seen[d] = true
			fmt.Fprintln(warn, "orderly: warning:", d.Error())
		}
	}
}

// readEntries calls fn for every dead letter of o's source, in the
// source's order (the store's; the topic's by partition and offset).
func readEntries(ctx context.Context, o *dlqOpts, warn io.Writer, fn func(*entry) error) (source string, err error) {
	if o.data != "" {
		s, err := openStore(o.data, warnDamage(warn))
		if err != nil {
			return "", err
		}
		defer s.Close()
		return s.Dir(), s.Scan(func(pos int64, r deadletter.Record) error {
			e := newEntry(r)
			e.local, e.pos = true, pos
			return fn(&e)
		})
	}
	source = fmt.Sprintf("topic %s", o.topic)
	client, err := dialKafka(ctx, o.brokers)
	if err != nil {
		return source, err
	}
	defer client.Close()
	return source, interrupted(ctx, readTopic(ctx, client, o.topic, fn))
}

// dlqSarama is the sarama configuration of the dlq commands: a replay is
// acknowledged by all in-sync replicas, in order (one request in flight).
func dlqSarama() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_0_0_0
	cfg.ClientID = "orderly-dlq"
	cfg.Net.DialTimeout = 10 * time.Second
	cfg.Net.MaxOpenRequests = 1
	cfg.Metadata.Retry.Max = 1
	cfg.Consumer.Return.Errors = true
	cfg.Consumer.MaxWaitTime = 50 * time.Millisecond
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	return cfg
}

func dialKafka(ctx context.Context, brokers []string) (sarama.Client, error) {
	return untilInterrupted(ctx, "connecting to the Kafka cluster", func() (sarama.Client, error) {
		client, err := sarama.NewClient(brokers, dlqSarama())
		if err != nil {
			return nil, fmt.Errorf("connect to the Kafka cluster: %w", err) // sarama's error names the brokers
		}
		return client, nil
	}, func(c sarama.Client) { c.Close() })
}

// readTopic reads topic from each partition's oldest offset to its high
// watermark as of the start, without a consumer group, and calls fn for
// each record, partition by partition.
func readTopic(ctx context.Context, client sarama.Client, topic string, fn func(*entry) error) error {
	parts, err := client.Partitions(topic)
	if err != nil {
		return fmt.Errorf("dead-letter topic %s: %w", topic, err)
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return fmt.Errorf("consume %s: %w", topic, err)
	}
	defer consumer.Close()
	// Start every partition's consumer first: sarama gathers new
	// subscriptions for 100ms before it fetches, once for all of them.
	type span struct {
		p         int32
		low, high int64
		pc        sarama.PartitionConsumer
	}
	var spans []span
	defer func() {
		// Each Close waits for its fetch in flight (up to MaxWaitTime):
		// together, they wait once.
		var wg sync.WaitGroup
		for _, s := range spans {
			wg.Go(func() { s.pc.Close() })
		}
		wg.Wait()
	}()
	for _, p := range parts {
		low, high, err := watermarks(client, topic, p)
		if err != nil {
			return err
		}
		if low >= high {
			continue
		}
		pc, err := consumer.ConsumePartition(topic, p, low)
		if err != nil {
			return fmt.Errorf("read %s/%d from offset %d: %w", topic, p, low, err)
		}
		spans = append(spans, span{p, low, high, pc})
	}
	for _, s := range spans {
		if err := readPartition(ctx, s.pc, topic, s.p, s.high, fn); err != nil {
			return err
		}
	}
	return nil
}

// watermarks are a partition's log start offset and high watermark.
func watermarks(client sarama.Client, topic string, p int32) (low, high int64, err error) {
	if low, err = client.GetOffset(topic, p, sarama.OffsetOldest); err == nil {
		high, err = client.GetOffset(topic, p, sarama.OffsetNewest)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("offsets of %s/%d: %w", topic, p, err)
	}
	return low, high, nil
}

// readPartition reads pc up to offset high and calls fn for each record.
func readPartition(ctx context.Context, pc sarama.PartitionConsumer, topic string, p int32, high int64, fn func(*entry) error) error {
	for {
		select {
		case m := <-pc.Messages():
			r := deadletter.Record{Key: m.Key, Value: m.Value, Timestamp: m.Timestamp.UTC()}
			for _, h := range m.Headers {
				r.Headers = append(r.Headers, deadletter.Header{Key: h.Key, Value: h.Value})
			}
			e := newEntry(r)
			e.partition, e.offset = p, m.Offset
			if err := fn(&e); err != nil {
				return err
			}
			if m.Offset+1 >= high {
				return nil
			}
		case err := <-pc.Errors():
			return fmt.Errorf("read %s/%d: %w", topic, p, err)
		case <-ctx.Done():
			return fmt.Errorf("read %s/%d: %w", topic, p, context.Cause(ctx))
		}
	}
}
