package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/orderly-go/orderly/internal/deadletter"
	"github.com/orderly-go/orderly/internal/endoffsets"
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
	n := s.Stats().Mended
	what := fmt.Sprintf("%d dead letters have a damaged length field, read by their checksums", n)
	switch n {
	case 0:
		return
	case 1:
		what = "1 dead letter has a damaged length field, read by its checksum"
	}
	fmt.Fprintf(warn, "orderly: warning: %s: %s (the consumer's next start, or a purge, writes it back)\n",
		filepath.Join(s.Dir(), deadletter.DataFile), what)
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
// source's order (the store's; the topic's by partition and offset). A
// topic is read with client, or with a client of its own when that is
// nil.
func readEntries(ctx context.Context, o *dlqOpts, client sarama.Client, warn io.Writer, fn func(*entry) error) (source string, err error) {
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
	if client == nil {
		if client, err = dialKafka(ctx, o); err != nil {
			return source, err
		}
		defer client.Close()
	}
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
	return untilInterrupted(ctx, "connecting to the Kafka cluster", func() (sarama.Client, error) {
		return o.kafka.newClient(o.brokers, dlqSarama())
	}, func(c sarama.Client) { c.Close() })
}

// readTopic reads topic as a read-committed consumer would, from each
// partition's oldest offset to its end as of the start, without a consumer
// group, and calls fn for each record, partition by partition: records of
// aborted transactions are left out, and the records a transaction still
// open holds back are warned of on warn. It reads through a topicCheck:
// fn sees nothing, and warn gets nothing, of a topic that holds no dead
// letters, which it refuses.
func readTopic(ctx context.Context, client sarama.Client, o *dlqOpts, warn io.Writer, fn func(*entry) error) error {
	parts, err := client.Partitions(o.topic)
	if err != nil {
		return fmt.Errorf("dead-letter topic %s: %w", o.topic, err)
	}
	spans, err := partitionSpans(client, o.topic, parts)
	if err != nil {
		return err
	}
	c := &topicCheck{o: o, pass: fn, warn: warn}
	return c.end(readSpans(ctx, o, spans, c, c.record))
}

// partitionSpans looks up each partition's log start and high watermark
// once: one span for each of parts, in order, empty ones included.
func partitionSpans(client sarama.Client, topic string, parts []int32) ([]span, error) {
	spans := make([]span, len(parts))
	for i, p := range parts {
		low, high, err := watermarks(client, topic, p)
		if err != nil {
			return nil, err
		}
		spans[i] = span{p, low, high}
	}
	return spans, nil
}

// span is the offsets [low, high) of a partition to read.
type span struct {
	p         int32
	low, high int64
}

// readSpans reads each span of o's topic in turn (an empty one is passed
// over) and calls fn for each
// record a read-committed consumer would see (see txOrder). It reads
// every record and transaction marker with franz-go's client keeping
// control records, which sarama's consumer drops without a word: only a
// marker says that a span ending in one was read to its end.
func readSpans(ctx context.Context, o *dlqOpts, spans []span, warn io.Writer, fn func(*entry) error) error {
	if !slices.ContainsFunc(spans, func(s span) bool { return s.low < s.high }) {
		return nil // nothing to read: no client
	}
	opts, err := o.kafka.kgoOpts()
	if err != nil {
		return err
	}
	// No reset: franz-go would resume at the new log start without a
	// word if records were deleted during the read, and a transaction's
	// marker skipped that way would leave its records to the next marker
	// of the same producer, or hold everything after them back.
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(o.brokers...), kgo.ClientID("orderly-dlq"), kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		kgo.FetchMaxWait(50*time.Millisecond), kgo.DialTimeout(10*time.Second))...)
	if err != nil {
		return fmt.Errorf("consume %s: %w", o.topic, err)
	}
	defer cl.Close()
	for _, s := range spans {
		if s.low >= s.high {
			continue
		}
		cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{o.topic: {s.p: kgo.NewOffset().At(s.low)}})
		tx := &txOrder{pass: fn}
		err := readSpan(ctx, cl, o.topic, s, tx)
		cl.RemoveConsumePartitions(map[string][]int32{o.topic: {s.p}})
		if err != nil {
			return err
		}
		if first, committed, ok := tx.heldBack(); ok {
			fmt.Fprintf(warn, "orderly: warning: %s/%d: offsets %d to %d not read: a transaction open since offset %d holds them back (%s among them) until it ends\n",
				o.topic, s.p, first, s.high-1, first, plural(committed, "committed record"))
		}
	}
	return nil
}

// readSpan reads s with cl, which consumes s's partition from s.low, into
// tx.
func readSpan(ctx context.Context, cl *kgo.Client, topic string, s span, tx *txOrder) error {
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("read %s/%d: %w", topic, s.p, context.Cause(ctx))
		}
		var err error
		fetches.EachError(func(t string, p int32, ferr error) {
			switch {
			case err != nil:
			case errors.Is(ferr, kerr.OffsetOutOfRange):
				err = fmt.Errorf("read %s/%d: %w: records were deleted while it was read (a purge, or retention); run the command again", t, p, ferr)
			default:
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
			if m.Attrs.IsControl() {
				err = tx.marker(m.Key, m.ProducerID)
			} else {
				r := deadletter.Record{Key: m.Key, Value: m.Value, Timestamp: m.Timestamp.UTC()}
				for _, h := range m.Headers {
					r.Headers = append(r.Headers, deadletter.Header{Key: []byte(h.Key), Value: h.Value})
				}
				e := newEntry(r)
				e.partition, e.offset = s.p, m.Offset
				err = tx.record(e, m.Attrs.IsTransactional(), m.ProducerID)
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

// lastStable is the last stable offsets of topic's partitions parts
// (endoffsets.List, read-committed). Like sarama's GetOffset, it
// refreshes the leaders and asks once more when the first answer is an
// error (a leader that moved).
func lastStable(client sarama.Client, topic string, parts []int32) (map[topicPart]int64, error) {
	q := map[string][]int32{topic: parts}
	offs, err := endoffsets.List(client, dlqSarama().Version, q, sarama.ReadCommitted)
	if err != nil && client.RefreshMetadata(topic) == nil {
		offs, err = endoffsets.List(client, dlqSarama().Version, q, sarama.ReadCommitted)
	}
	return offs, err
}
