package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/internal/deadletter"
)

// replayBatch is how many records replay hands sarama at a time.
const replayBatch = 500

// dest is where a replayed record goes.
type dest struct {
	topic     string
	partition int32
}

func (d dest) String() string {
	if d.partition < 0 {
		return d.topic + " (by key)"
	}
	return fmt.Sprintf("%s/%d", d.topic, d.partition)
}

// runReplay is `orderly dlq replay`.
func runReplay(ctx context.Context, o *dlqOpts, e env) error {
	if err := o.prepare(); err != nil {
		return err
	}
	if len(o.brokers) == 0 && !o.dryRun {
		return usagef("replay needs --brokers: the cluster to publish to")
	}
	if len(o.brokers) > 0 {
		if err := o.kafka.check(); err != nil {
			return err
		}
	}
	// One client reads a topic and publishes what it selected: dialed
	// here for a topic source, by replay for a local store (and only
	// when there is something to publish).
	var client sarama.Client
	if o.topic != "" {
		var err error
		if client, err = dialKafka(ctx, o); err != nil {
			return err
		}
		defer client.Close()
	}
	var (
		picked  []*entry
		skipped []string
		strays  []*entry // not dead letters, sent to --to as they are
		n       tally    // selected: picked
	)
	source, err := readEntries(ctx, o, client, e.stderr, func(en *entry) error {
		matched := o.filter.match(en)
		if matched {
			n.add(en, o.to != "" || en.infoErr == nil)
		}
		switch {
		case !matched:
		case en.infoErr != nil && o.to == "":
			skipped = append(skipped, fmt.Sprintf("%s: %v", en.where(), en.infoErr))
		case en.infoErr != nil:
			strays = append(strays, en)
			picked = append(picked, en)
		default:
			picked = append(picked, en)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// A record that is not a dead letter has no origin (whatever
	// __orderly.errors.* headers it has do not make one); --to gets it
	// as it is, its headers too (replay keeps them), but not without a
	// word (nor does a dry run say nothing).
	for _, en := range strays {
		fmt.Fprintf(e.stderr, "orderly: warning: %s is not a dead letter (%v): %s gets it as it is: key, value, headers and timestamp\n", en.where(), en.infoErr, flagArg(o.fs, "to", o.to))
	}
	// In origin order, so that a key's records go back in the order
	// they first came.
	slices.SortStableFunc(picked, func(a, b *entry) int {
		return cmp.Or(strings.Compare(a.info.Topic, b.info.Topic),
			cmp.Compare(a.info.Partition, b.info.Partition), cmp.Compare(a.info.Offset, b.info.Offset))
	})
	for _, s := range skipped {
		fmt.Fprintln(e.stderr, "orderly: warning: not replayed:", s)
	}
	sent, err := replay(ctx, o, client, picked)
	if err != nil {
		if k := sum(sent); k > 0 {
			fmt.Fprintf(e.stdout, "replayed %d of %s before the error%s\n", k, plural(len(picked), "selected record"), perDest(sent))
		}
		return interrupted(ctx, err)
	}
	verb := "replayed"
	if o.dryRun {
		verb = "would replay"
	}
	fmt.Fprintf(e.stdout, "%s %s from %s%s\n", verb, n.counts("selected "), source, perDest(sent))
	if len(skipped) > 0 {
		return fmt.Errorf("%s not replayed: not dead letters (the warnings above say what each lacks), they have no origin to go back to: %s names a topic for them",
			plural(len(skipped), "selected record"), flagArg(o.fs, "to"))
	}
	if !o.dryRun && len(picked) > 0 {
		fmt.Fprintln(e.stdout, "the dead letters are still there: `orderly dlq purge` removes them")
	}
	return nil
}

// perDest is ": topic/p n, ..." for the counts by destination.
func perDest(sent map[dest]int) string {
	if len(sent) == 0 {
		return ""
	}
	ds := slices.SortedFunc(maps.Keys(sent), func(a, b dest) int {
		return cmp.Or(strings.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
	})
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%s %d", d, sent[d])
	}
	return ": " + strings.Join(parts, ", ")
}

// replay publishes picked with client (or with --dry-run only works out
// where each would go) and returns the count per destination. A nil
// client (a local store's records) is dialed when there are --brokers,
// and closed at the end.
func replay(ctx context.Context, o *dlqOpts, client sarama.Client, picked []*entry) (map[dest]int, error) {
	sent := map[dest]int{}
	if len(picked) == 0 {
		return sent, nil
	}
	if client == nil && len(o.brokers) > 0 {
		var err error
		if client, err = dialKafka(ctx, o); err != nil {
			return nil, err
		}
		defer client.Close()
	}
	msgs := make([]*sarama.ProducerMessage, len(picked))
	dests := make([]dest, len(picked))
	counts := map[string]int32{} // partitions per target topic
	for i, en := range picked {
		topic := cmp.Or(o.to, en.info.Topic)
		if _, ok := counts[topic]; !ok && client != nil {
			ps, err := client.Partitions(topic)
			if err != nil {
				return nil, fmt.Errorf("replay to topic %s: %w", topic, err)
			}
			counts[topic] = int32(len(ps))
		}
		m := &sarama.ProducerMessage{Topic: topic, Timestamp: en.rec.Timestamp}
		if en.rec.Key != nil {
			m.Key = sarama.ByteEncoder(en.rec.Key)
		}
		if en.rec.Value != nil {
			m.Value = sarama.ByteEncoder(en.rec.Value)
		}
		// A dead letter goes back without the headers its dead-lettering
		// added; a stray (only with --to) as it is, with all of them.
		headers := en.rec.Headers
		if en.infoErr == nil {
			headers = deadletter.Original(headers)
		}
		for _, h := range headers {
			m.Headers = append(m.Headers, sarama.RecordHeader{Key: h.Key, Value: h.Value})
		}
		switch n, known := counts[topic]; {
		case o.to == "":
			// Back to the partition it came from: its key's partition.
			m.Partition = en.info.Partition
			if known && m.Partition >= n {
				return nil, fmt.Errorf("replay %s/%d offset %d: topic %s has only %s now",
					en.info.Topic, en.info.Partition, en.info.Offset, topic, plural(int(n), "partition"))
			}
		case known:
			p, err := sarama.NewHashPartitioner(topic).Partition(m, n)
			if err != nil {
				return nil, fmt.Errorf("partition for %s: %w", topic, err)
			}
			m.Partition = p
		default:
			m.Partition = -1 // dry run without --brokers: by key, partition unknown
		}
		msgs[i], dests[i] = m, dest{topic, m.Partition}
	}
	if o.dryRun {
		for _, d := range dests {
			sent[d]++
		}
		return sent, nil
	}
	producer, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		return nil, fmt.Errorf("producer for %s: %w", flagArg(o.fs, "brokers", strings.Join(o.brokers, ",")), err)
	}
	defer producer.Close()
	for start := 0; start < len(msgs); start += replayBatch {
		if err := ctx.Err(); err != nil {
			return sent, fmt.Errorf("replayed %d of %d: %w", start, len(msgs), context.Cause(ctx))
		}
		end := min(start+replayBatch, len(msgs))
		err := producer.SendMessages(msgs[start:end])
		perrs, ok := err.(sarama.ProducerErrors)
		for i := start; i < end && (err == nil || ok); i++ {
			if !slices.ContainsFunc(perrs, func(pe *sarama.ProducerError) bool { return pe.Msg == msgs[i] }) {
				sent[dests[i]]++
			}
		}
		if err != nil {
			return sent, replayError(err, picked, msgs, start)
		}
	}
	return sent, nil
}

// replayError names the first record of a failed batch that sarama
// reports, with its origin.
func replayError(err error, picked []*entry, msgs []*sarama.ProducerMessage, start int) error {
	if perrs, ok := err.(sarama.ProducerErrors); ok && len(perrs) > 0 {
		i := slices.Index(msgs, perrs[0].Msg)
		if i >= 0 {
			en := picked[i]
			return fmt.Errorf("replay %s/%d offset %d to %s/%d (%d of this batch failed; %s): %w",
				en.info.Topic, en.info.Partition, en.info.Offset, msgs[i].Topic, msgs[i].Partition, len(perrs), sentBefore(start), perrs[0].Err)
		}
	}
	return fmt.Errorf("replay (%s): %w", sentBefore(start), err)
}

// sentBefore says that n records, those of the batches before the one
// that failed, were sent: the verb agrees with the count.
func sentBefore(n int) string {
	verb := "were"
	if n == 1 {
		verb = "was"
	}
	return fmt.Sprintf("%s before this batch %s sent", plural(n, "record"), verb)
}

func sum(m map[dest]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// plural is "1 thing" or "n things" ("n stretches" after ch, s, sh or x).
func plural(n int, thing string) string {
	switch {
	case n == 1:
		return "1 " + thing
	case strings.HasSuffix(thing, "ch"), strings.HasSuffix(thing, "s"), strings.HasSuffix(thing, "sh"), strings.HasSuffix(thing, "x"):
		return fmt.Sprintf("%d %ses", n, thing)
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
