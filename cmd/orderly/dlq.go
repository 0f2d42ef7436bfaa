package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/orderly-go/orderly/internal/deadletter"
)

// dlqOpts are the flags of the `orderly dlq` commands: the source, the
// filters, and each command's own.
type dlqOpts struct {
	data    string
	brokers []string
	topic   string
	kafka   kafkaFlags // TLS and SASL of --brokers
	fs      *pflag.FlagSet

	filter filter

	json   bool
	to     string
	dryRun bool
	yes    bool
	before int
	// dropDamaged: a filtered purge of a local store may drop its
	// damaged stretches (a rewrite cannot keep what it cannot read).
	dropDamaged bool
}

const dlqSourceHelp = `
The dead letters come from one source: --data DIR, the DataPath of a
consumer whose dead letters go to its local store (DIR/` + deadletter.DirName + `), or
--brokers and --topic, a Kafka dead-letter topic (from its oldest offset to
its end at the start, without a consumer group, as a read-committed
consumer reads it: aborted transactions left out, an open one holding back
what follows it; --tls* and --sasl-* for a secured cluster, as for
consume). A topic with records but no dead letter among its first 10,000
records, or first 32 MiB of them, is refused.`

const dlqFilterHelp = `
Filters select by the __orderly.errors.* headers: --reason, --origin-topic,
--partition (the origin partition), --from-offset/--to-offset (origin
offsets, inclusive), --since/--until (when it was dead-lettered: RFC 3339,
or a duration ago such as 2h; --since inclusive, --until exclusive). A
record without those headers is selected only when no filter is given.`

// dlqCommand is `orderly dlq`: list, show, replay and purge dead letters.
func dlqCommand(e env) *cobra.Command {
	c := newCommand("dlq", "list, show, replay or purge dead letters (a consumer's local store or a Kafka topic)",
		`Work with the dead letters Orderly wrote: the local dead-letter store under a
consumer's DataPath (--data), or a Kafka dead-letter topic (--brokers, --topic).`+dlqSourceHelp,
		func(context.Context) error {
			return usagef("orderly dlq needs a command: list, show, replay or purge")
		})
	c.SuggestionsMinimumDistance = 2 // as the root's: "lst" suggests "list"
	c.AddCommand(dlqListCommand(e), dlqShowCommand(e), dlqReplayCommand(e), dlqPurgeCommand(e))
	return c
}

func dlqListCommand(e env) *cobra.Command {
	o := &dlqOpts{}
	c := newCommand("list", "one line per dead letter: origin, reason, attempts, when, size, error",
		`List dead letters, one line each: origin topic, partition and offset, reason,
attempts, when it was dead-lettered, size (key and value), and the start of
the error. --json writes one JSON object per line instead.`+dlqSourceHelp+"\n"+dlqFilterHelp,
		func(ctx context.Context) error { return runList(ctx, o, e) })
	fs := c.Flags()
	o.sourceFlags(fs)
	o.filter.define(fs)
	fs.BoolVar(&o.json, "json", false, "one JSON object per line, for scripts")
	return c
}

func dlqShowCommand(e env) *cobra.Command {
	o := &dlqOpts{}
	c := newCommand("show", "each selected dead letter in full: headers, key, value",
		`Show each selected dead letter in full: what the headers say, every header,
the original timestamp, key and value (as text when they are UTF-8, else
base64, saying so). --json writes one JSON object per line instead.`+dlqSourceHelp+"\n"+dlqFilterHelp,
		func(ctx context.Context) error { return runShow(ctx, o, e) })
	fs := c.Flags()
	o.sourceFlags(fs)
	o.filter.define(fs)
	fs.BoolVar(&o.json, "json", false, "one JSON object per line, for scripts")
	return c
}

func dlqReplayCommand(e env) *cobra.Command {
	o := &dlqOpts{}
	c := newCommand("replay", "republish the selected dead letters to their origin topic (or --to)",
		`Republish the selected dead letters with their original key, value, headers
(without the __orderly.errors.* ones) and timestamp, acknowledged by all
in-sync replicas, in origin offset order: each to the topic and partition it
came from, or with --to to that topic, partitioned by key (sarama's hash
partitioner). A record that is not a dead letter has no origin: only --to
takes it, as it is, with all its headers. --brokers is the cluster to
publish to. The dead letters stay where they are: purge them once the
replay has done its work.`+dlqSourceHelp+"\n"+dlqFilterHelp,
		func(ctx context.Context) error { return runReplay(ctx, o, e) })
	fs := c.Flags()
	o.sourceFlags(fs)
	o.filter.define(fs)
	stringVar(fs, &o.to, "to", "", kafkaName, "topic to publish to instead of each record's origin topic")
	fs.BoolVar(&o.dryRun, "dry-run", false, "say what would be published where, publish nothing")
	return c
}

func dlqPurgeCommand(e env) *cobra.Command {
	o := &dlqOpts{}
	c := newCommand("purge", "delete dead letters: a prefix of a Kafka topic, or selected ones of a local store",
		`Delete dead letters for good (--yes, or --dry-run to see what would go).

On a Kafka topic, purge deletes a prefix of the log with DeleteRecords:
with --partition P (here the dead-letter topic's own partition) the records
of P before --before OFFSET, or all of P; with neither, every partition up
to its end. Filters cannot select records there. With --partition P, the
records of P decide whether the topic holds dead letters, and when P
holds none (only records someone else produced there), the first records
of the other partitions: a dead letter there lets P be purged.

On a local store (--data), purge removes every record, the dead letters and
any other records, or only the records the filters select, by rewriting the
store; it needs the store's lock, so it fails while a consumer holds it. The
rewrite cannot keep a damaged stretch (whatever records it held are
unreadable): a purge without filters drops it with the rest; with filters, a
store with damage is purged only with --drop-damaged.`+dlqSourceHelp+"\n"+dlqFilterHelp,
		func(ctx context.Context) error { return runPurge(ctx, o, e) })
	fs := c.Flags()
	o.sourceFlags(fs)
	o.filter.define(fs)
	intVar(fs, &o.before, "before", 0, 0, math.MaxInt, "Kafka: delete the records of --partition before this offset")
	fs.BoolVar(&o.yes, "yes", false, "really delete")
	fs.BoolVar(&o.dryRun, "dry-run", false, "say what would be deleted, delete nothing")
	fs.BoolVar(&o.dropDamaged, "drop-damaged", false, "local store: let a purge with filters drop the store's damaged stretches too (refused without it: a rewrite cannot keep what it cannot read)")
	return c
}

func (o *dlqOpts) sourceFlags(fs *pflag.FlagSet) {
	o.fs = fs
	stringVar(fs, &o.data, "data", "", nil, "a consumer's DataPath: read its local dead-letter store, DATA/"+deadletter.DirName)
	listVar(fs, &o.brokers, "brokers", nil, false, dialAddr, "comma-separated host:port of the Kafka cluster (the dead-letter topic's, and replay's target)")
	stringVar(fs, &o.topic, "topic", "", kafkaName, "the Kafka dead-letter topic to read (with --brokers)")
	o.kafka.define(fs)
}

// checkSource is the usage check of the source flags: exactly one of
// --data and --topic, and --brokers with --topic.
func (o *dlqOpts) checkSource() error {
	switch {
	case o.data != "" && o.topic != "":
		return usagef("give one source: %s or %s, not both", flagArg(o.fs, "data", o.data), flagArg(o.fs, "topic", o.topic))
	case o.data == "" && o.topic == "":
		return usagef("no source: give --data DIR (a consumer's DataPath) or --brokers HOST:PORT --topic TOPIC")
	case o.topic != "" && len(o.brokers) == 0:
		return usagef("%s needs --brokers (the cluster it is on)", flagArg(o.fs, "topic", o.topic))
	case o.topic == "":
		// Reading a local store dials no broker (replay checks the
		// Kafka flags itself when it publishes): an ORDERLY_BROKERS or
		// ORDERLY_SASL_PASSWORD set for consume is no error here.
		return nil
	}
	return o.kafka.check()
}

// filter selects dead letters by what their headers say.
type filter struct {
	reason, originTopic string
	partition           int
	from, to            int
	since, until        time.Time
	set                 map[string]bool // the filter flags given
	fs                  *pflag.FlagSet
}

var filterFlags = []string{"reason", "origin-topic", "partition", "from-offset", "to-offset", "since", "until"}

func (f *filter) define(fs *pflag.FlagSet) {
	f.fs = fs
	stringVar(fs, &f.reason, "reason", "", oneOf(deadletter.Reasons...), "only dead letters with this reason: "+strings.Join(deadletter.Reasons, ", "))
	stringVar(fs, &f.originTopic, "origin-topic", "", nonEmpty, "only dead letters from this topic")
	intVar(fs, &f.partition, "partition", 0, 0, math.MaxInt32, "only dead letters from this origin partition (purge on Kafka: the dead-letter topic's partition)")
	intVar(fs, &f.from, "from-offset", 0, 0, math.MaxInt, "only dead letters from this origin offset on")
	intVar(fs, &f.to, "to-offset", 0, 0, math.MaxInt, "only dead letters up to this origin offset (inclusive)")
	timeVar(fs, &f.since, "since", "only dead letters dead-lettered at or after this time (RFC 3339, or a duration ago: 2h)")
	timeVar(fs, &f.until, "until", "only dead letters dead-lettered before this time (RFC 3339, or a duration ago: 30m)")
}

// check records which filters were given and checks the pairs.
func (f *filter) check() error {
	f.set = map[string]bool{}
	for _, name := range filterFlags {
		f.set[name] = f.fs.Changed(name)
	}
	if f.set["from-offset"] && f.set["to-offset"] && f.from > f.to {
		return usagef("%s is after %s", flagArg(f.fs, "from-offset", f.from), flagArg(f.fs, "to-offset", f.to))
	}
	if f.set["since"] && f.set["until"] && !f.since.Before(f.until) {
		return usagef("%s is not before %s", flagArg(f.fs, "since", deadletter.FormatTime(f.since)), flagArg(f.fs, "until", deadletter.FormatTime(f.until)))
	}
	return nil
}

// any reports whether a filter was given.
func (f *filter) any() bool {
	for _, v := range f.set {
		if v {
			return true
		}
	}
	return false
}

// match reports whether e is selected. A record whose headers do not
// parse is selected only when there is no filter.
func (f *filter) match(e *entry) bool {
	if e.infoErr != nil {
		return !f.any()
	}
	i := e.info
	switch {
	case f.set["reason"] && i.Reason != f.reason,
		f.set["origin-topic"] && i.Topic != f.originTopic,
		f.set["partition"] && i.Partition != int32(f.partition),
		f.set["from-offset"] && i.Offset < int64(f.from),
		f.set["to-offset"] && i.Offset > int64(f.to),
		f.set["since"] && i.Timestamp.Before(f.since),
		f.set["until"] && !i.Timestamp.Before(f.until):
		return false
	}
	return true
}

// timeVar defines a time flag: RFC 3339, or a duration before now.
func timeVar(fs *pflag.FlagSet, p *time.Time, name, usage string) {
	define(fs, &value[time.Time]{p: p, typ: "time", format: func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return deadletter.FormatTime(t)
	}, parse: parseTimeOrAgo}, name, time.Time{}, usage)
}

func parseTimeOrAgo(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return time.Time{}, errors.New("not a time (RFC 3339, e.g. 2026-01-02T15:04:05Z) or a duration ago (e.g. 2h, 30m)")
	}
	if d < 0 {
		return time.Time{}, errors.New("a duration ago must not be negative")
	}
	return time.Now().Add(-d).UTC(), nil
}

// prepare checks the source and the filters.
func (o *dlqOpts) prepare() error {
	if err := o.checkSource(); err != nil {
		return err
	}
	return o.filter.check()
}

// interrupted turns an error after ctx ended into the interrupted error
// (exit 3).
func interrupted(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return &interruptedError{msg: fmt.Sprintf("%v: %v", context.Cause(ctx), err)}
	}
	return err
}
