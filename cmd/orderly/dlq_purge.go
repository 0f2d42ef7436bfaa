package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/internal/deadletter"
	"github.com/orderly-go/orderly/internal/flock"
)

// runPurge is `orderly dlq purge`.
func runPurge(ctx context.Context, o *dlqOpts, e env) error {
	if err := o.prepare(); err != nil {
		return err
	}
	if !o.yes && !o.dryRun {
		return usagef("purge deletes dead letters for good: add --yes (or --dry-run to see what it would delete)")
	}
	if o.topic != "" {
		return purgeTopic(ctx, o, e)
	}
	if o.filter.fs.Changed("before") {
		return usagef("%s is for a Kafka topic (DeleteRecords); select the records of a local store with the filters", flagArg(o.filter.fs, "before"))
	}
	return purgeStore(o, e)
}

// purgeStore removes the selected records of the local store (all of
// them, dead letters and other records, without filters) by rewriting
// it, under its lock, dropping its damaged stretches (with filters, only
// when --drop-damaged says so). It counts the dead
// letters and the other records (strays) apart, as list and show do.
func purgeStore(o *dlqOpts, e env) error {
	// Read-only first: a missing store is an error, not created by the
	// writable Open; and a dry run needs no lock.
	warn := warnDamage(e.stderr) // one warning per stretch, for both opens
	ro, err := openStore(o.data, warn)
	if err != nil {
		return err
	}
	warnMended(e.stderr, ro)
	damaged := ro.Stats().Damaged // as Open read it, and warned of it
	var n tally
	err = ro.Scan(func(_ int64, r deadletter.Record) error {
		en := newEntry(r)
		n.add(&en, o.filter.match(&en))
		return nil
	})
	ro.Close()
	if err != nil {
		return err
	}
	dir := storeDir(o.data)
	stretches := plural(int(damaged), "damaged stretch") + " (the warnings above)"
	if damaged == 1 {
		stretches = "1 damaged stretch (the warning above)"
	}
	// Every purge drops the damaged stretches: one with filters
	// rewrites the store and cannot keep them, one without empties it.
	dropping := damaged > 0
	switch {
	case o.dryRun && dropping:
		fmt.Fprintf(e.stdout, "would remove %s from %s, and drop %s\n", n.counts(""), dir, stretches)
		return nil
	case o.dryRun:
		fmt.Fprintf(e.stdout, "would remove %s from %s\n", n.counts(""), dir)
		return nil
	case dropping && o.filter.any() && !o.dropDamaged:
		return fmt.Errorf("%s has %s, which a purge with filters would drop with any dead letters they hold: add --drop-damaged to purge anyway", dir, stretches)
	}
	s, err := deadletter.Open(dir, deadletter.Options{OnDamage: warn})
	if errors.Is(err, flock.ErrHeld) {
		return fmt.Errorf("%w; stop that consumer before purging", err)
	}
	if err != nil {
		return err
	}
	defer s.Close()
	// Counted again under the lock: what the store held when it was
	// rewritten, and what went.
	var done tally
	if o.filter.any() {
		_, err = s.Rewrite(func(_ int64, r deadletter.Record) bool {
			en := newEntry(r)
			selected := o.filter.match(&en)
			done.add(&en, selected)
			return !selected
		})
	} else if err = s.Scan(func(_ int64, r deadletter.Record) error {
		en := newEntry(r)
		done.add(&en, true)
		return nil
	}); err == nil {
		_, err = s.Purge()
	}
	if err != nil {
		return err
	}
	dropped := ""
	if dropping {
		dropped = "; dropped " + stretches
	}
	fmt.Fprintf(e.stdout, "removed %s from %s, %d left%s\n", done.selectedCounts(), dir, s.Stats().Records, dropped)
	return s.Close()
}

// checkOthers decides, when c found no dead letter in --partition (a
// partition of strays: records someone else produced to the dead-letter
// topic), from the topic's other partitions (all of them, parts, but
// --partition): a dead letter among their first records makes it a
// dead-letter topic, whose partition of strays purge may delete; none, or
// no other records, refuses it, saying which.
func checkOthers(ctx context.Context, client sarama.Client, o *dlqOpts, c *topicCheck, parts []int32) error {
	others := slices.DeleteFunc(slices.Clone(parts), func(p int32) bool { return p == int32(o.filter.partition) })
	if len(others) == 0 {
		return c.refuse(c.counted())
	}
	spans, err := partitionSpans(client, o.topic, others)
	if err != nil {
		return err
	}
	oc := &topicCheck{o: o, in: " in its other partitions", warn: io.Discard}
	if _, err := oc.decide(readSpans(ctx, o, spans, oc, oc.record)); err != nil || oc.found {
		return err
	}
	if oc.n == 0 {
		return fmt.Errorf("%w; its other partitions hold no record", c.refuse(c.counted()))
	}
	return c.refuse(c.counted() + ", and none of " + oc.counted() + ",")
}

// purgeTopic deletes a prefix of the dead-letter topic's partitions with
// DeleteRecords: --partition's records before --before, or all of it, or
// every partition up to its last stable offset (its high watermark unless
// a transaction is open).
func purgeTopic(ctx context.Context, o *dlqOpts, e env) error {
	f := &o.filter
	for _, name := range filterFlags {
		if f.set[name] && name != "partition" {
			return usagef("%s cannot select records of a Kafka topic: purge deletes a prefix of each partition (DeleteRecords); use --partition and --before", flagArg(f.fs, name))
		}
	}
	before := f.fs.Changed("before")
	if before && !f.set["partition"] {
		return usagef("%s needs --partition: offsets are per partition", flagArg(f.fs, "before", o.before))
	}
	client, err := dialKafka(ctx, o)
	if err != nil {
		return err
	}
	defer client.Close()
	parts, err := client.Partitions(o.topic)
	if err != nil {
		return fmt.Errorf("dead-letter topic %s: %w", o.topic, err)
	}
	all := parts
	if f.set["partition"] {
		if !slices.Contains(parts, int32(f.partition)) {
			return fmt.Errorf("dead-letter topic %s has no partition %d (it has %d)", o.topic, f.partition, len(parts))
		}
		parts = []int32{int32(f.partition)}
	}
	// Up to the last stable offset: the records of a transaction still
	// open are not readable yet (list does not show them), and a commit
	// may still make them dead letters.
	stables, err := lastStable(client, o.topic, parts)
	if err != nil {
		return err
	}
	spans, err := partitionSpans(client, o.topic, parts)
	if err != nil {
		return err
	}
	// The partitions it would delete from decide whether the topic is
	// one of dead letters, before anything is deleted; when --partition
	// holds none, the other partitions.
	c := &topicCheck{o: o, warn: io.Discard}
	if f.set["partition"] {
		c.in = fmt.Sprintf(" in partition %d", f.partition)
	}
	refused, err := c.decide(readSpans(ctx, o, spans, c, c.record))
	switch {
	case err != nil:
		return interrupted(ctx, err)
	case refused && f.set["partition"]:
		err = checkOthers(ctx, client, o, c, all)
	case refused:
		err = c.refuse(c.counted())
	}
	if err != nil {
		return interrupted(ctx, err)
	}
	cut := map[int32]int64{}
	for _, s := range spans {
		p, low, high := s.p, s.low, s.high
		stable := stables[topicPart{Topic: o.topic, Part: p}]
		held := ""
		if stable < high {
			held = fmt.Sprintf("; offsets %d to %d, of a transaction still open, are kept", stable, high-1)
		}
		to := stable
		if before {
			if to = int64(o.before); to > stable {
				if held != "" {
					return fmt.Errorf("%s is past the end of %s/%d: its last stable offset is %d, a transaction open since then holds back offsets %d to %d", flagArg(o.filter.fs, "before", to), o.topic, p, stable, stable, high-1)
				}
				return fmt.Errorf("%s is past the end of %s/%d (high watermark %d)", flagArg(o.filter.fs, "before", to), o.topic, p, high)
			}
			held = ""
		}
		switch {
		case to <= low:
			fmt.Fprintf(e.stdout, "%s/%d: nothing to delete (log starts at %d%s)\n", o.topic, p, low, held)
		case o.dryRun:
			fmt.Fprintf(e.stdout, "%s/%d: would delete %s (offsets %d to %d%s)\n", o.topic, p, plural(int(to-low), "record"), low, to-1, held)
		default:
			cut[p] = to
			fmt.Fprintf(e.stdout, "%s/%d: deleting %s (offsets %d to %d%s)\n", o.topic, p, plural(int(to-low), "record"), low, to-1, held)
		}
	}
	if len(cut) == 0 {
		return nil
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return fmt.Errorf("cluster admin for %s: %w", o.topic, err)
	}
	if err := admin.DeleteRecords(o.topic, cut); err != nil {
		return interrupted(ctx, fmt.Errorf("delete records of %s: %w", o.topic, err))
	}
	for _, p := range slices.Sorted(maps.Keys(cut)) {
		low, err := client.GetOffset(o.topic, p, sarama.OffsetOldest)
		if err != nil {
			return fmt.Errorf("log start offset of %s/%d: %w", o.topic, p, err)
		}
		fmt.Fprintf(e.stdout, "%s/%d: log start offset now %d\n", o.topic, p, low)
	}
	return nil
}
