package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

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

// warnMended warns on warn when s read records whose length field was
// damaged, by their checksums.
func warnMended(warn io.Writer, s *deadletter.Store) {
	if n := s.Stats().Mended; n > 0 {
		fmt.Fprintf(warn, "orderly: warning: %s: %d dead letters have a damaged length field, read by their checksums (the consumer's next start, or a purge, writes it back)\n",
			filepath.Join(s.Dir(), deadletter.DataFile), n)
	}
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
		warnMended(warn, s)
		defer s.Close()
		return s.Dir(), s.Scan(func(pos int64, r deadletter.Record) error {
			e := newEntry(r)
			e.local, e.pos = true, pos
			return fn(&e)
		})
	}
	source = fmt.Sprintf("topic %s", o.topic)
	client, err := dialKafka(ctx, o)
	if err != nil {
		return source, err
	}
	defer client.Close()
	return source, interrupted(ctx, readTopic(ctx, client, o, warn, fn))
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

// dialKafka connects to o's --brokers with dlqSarama and o's TLS and SASL.
func dialKafka(ctx context.Context, o *dlqOpts) (sarama.Client, error) {
	cfg := dlqSarama()
	if err := o.kafka.apply(cfg); err != nil {
		return nil, err
	}
	return untilInterrupted(ctx, "connecting to the Kafka cluster", func() (sarama.Client, error) {
		client, err := sarama.NewClient(o.brokers, cfg)
		if err != nil {
			return nil, o.kafka.dialError(o.brokers, err)
		}
		return client, nil
	}, func(c sarama.Client) { c.Close() })
}

// readTopic reads topic's committed records, from each partition's oldest
// offset to its last stable offset as of the start (the high watermark
// unless a transaction is open), without a consumer group, and calls fn
// for each record, partition by partition. Records of aborted
// transactions are skipped, as the consumer skips them; a partition whose
// end an open transaction holds back is warned of on warn.
func readTopic(ctx context.Context, client sarama.Client, o *dlqOpts, warn io.Writer, fn func(*entry) error) error {
	topic := o.topic
	parts, err := client.Partitions(topic)
	if err != nil {
		return fmt.Errorf("dead-letter topic %s: %w", topic, err)
	}
	var spans []span
	for _, p := range parts {
		low, high, err := watermarks(client, topic, p)
		if err != nil {
			return err
		}
		stable, err := lastStable(client, topic, p)
		if err != nil {
			return err
		}
		if stable < high {
			fmt.Fprintf(warn, "orderly: warning: %s/%d: a transaction open since offset %d holds back offsets %d to %d; they are read once it ends\n",
				topic, p, stable, stable, high-1)
		}
		if low < stable {
			spans = append(spans, span{p, low, stable})
		}
	}
	return readSpans(ctx, o, spans, fn)
}

// span is the offsets [low, high) of a partition to read.
type span struct {
	p         int32
	low, high int64
}

// readSpans reads each span of topic in turn, read-committed, and calls fn
// for each record. It reads with franz-go's client keeping control records
// (transaction markers), which sarama's consumer drops without a word: a
// partition that ends in a marker, or in an aborted transaction and its
// marker, has no record for fn at its last offset, and only the marker
// says that its end was reached.
func readSpans(ctx context.Context, o *dlqOpts, spans []span, fn func(*entry) error) error {
	if len(spans) == 0 {
		return nil
	}
	topic := o.topic
	opts, err := o.kafka.kgoOpts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(o.brokers...), kgo.ClientID("orderly-dlq"), kgo.KeepControlRecords(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(50*time.Millisecond), kgo.DialTimeout(10*time.Second))...)
	if err != nil {
		return fmt.Errorf("consume %s: %w", topic, err)
	}
	defer cl.Close()
	for _, s := range spans {
		cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: {s.p: kgo.NewOffset().At(s.low)}})
		err := readSpan(ctx, cl, topic, s, fn)
		cl.RemoveConsumePartitions(map[string][]int32{topic: {s.p}})
		if err != nil {
			return err
		}
	}
	return nil
}

// readSpan reads s with cl, which consumes s's partition from s.low, and
// calls fn for each record that is not a control record.
func readSpan(ctx context.Context, cl *kgo.Client, topic string, s span, fn func(*entry) error) error {
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("read %s/%d: %w", topic, s.p, context.Cause(ctx))
		}
		var err error
		fetches.EachError(func(t string, p int32, ferr error) {
			if err == nil {
				err = fmt.Errorf("read %s/%d: %w", t, p, ferr)
			}
		})
		done := false
		fetches.EachRecord(func(m *kgo.Record) {
			if err != nil || done || m.Partition != s.p || m.Offset < s.low {
				return
			}
			if m.Offset >= s.high {
				done = true // past the end as of the start
				return
			}
			if !m.Attrs.IsControl() {
				r := deadletter.Record{Key: m.Key, Value: m.Value, Timestamp: m.Timestamp.UTC()}
				for _, h := range m.Headers {
					r.Headers = append(r.Headers, deadletter.Header{Key: []byte(h.Key), Value: h.Value})
				}
				e := newEntry(r)
				e.partition, e.offset = s.p, m.Offset
				err = fn(&e)
			}
			done = m.Offset+1 >= s.high
		})
		if err != nil || done {
			return err
		}
	}
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

// lastStable is a partition's last stable offset: the first offset of the
// oldest transaction still open, else the high watermark. sarama's
// GetOffset asks read-uncommitted, which answers the high watermark.
func lastStable(client sarama.Client, topic string, p int32) (int64, error) {
	leader, err := client.Leader(topic, p)
	if err != nil {
		return 0, fmt.Errorf("last stable offset of %s/%d: %w", topic, p, err)
	}
	req := &sarama.OffsetRequest{Version: 2, IsolationLevel: sarama.ReadCommitted}
	req.AddBlock(topic, p, sarama.OffsetNewest, 1)
	resp, err := leader.GetAvailableOffsets(req)
	if err != nil {
		return 0, fmt.Errorf("last stable offset of %s/%d: %w", topic, p, err)
	}
	b := resp.GetBlock(topic, p)
	switch {
	case b == nil:
		return 0, fmt.Errorf("last stable offset of %s/%d: no answer for the partition", topic, p)
	case b.Err != sarama.ErrNoError:
		return 0, fmt.Errorf("last stable offset of %s/%d: %w", topic, p, b.Err)
	}
	return b.Offset, nil
}
