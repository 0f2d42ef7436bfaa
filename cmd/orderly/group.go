package main

import (
	"context"

	"github.com/spf13/cobra"
)

// groupOpts are the flags of `orderly group describe`.
type groupOpts struct {
	brokers []string
	kafka   kafkaFlags // TLS and SASL of --brokers
	group   string
	topic   string
	json    bool
}

// groupCommand is `orderly group`: look at a consumer group from outside.
func groupCommand(e env) *cobra.Command {
	c := newCommand("group", "inspect a consumer group: committed offsets, lag, Orderly's commit metadata, members",
		`Look at a consumer group from outside, as the brokers see it.`,
		func(context.Context) error {
			return usagef("orderly group needs a command: describe")
		})
	c.SuggestionsMinimumDistance = 2
	c.AddCommand(groupDescribeCommand(e))
	return c
}

func groupDescribeCommand(e env) *cobra.Command {
	o := &groupOpts{}
	c := newCommand("describe", "per partition: committed offset, high watermark, lag, finished above the commit, waiting retries, owner",
		`Describe a consumer group: its state and members, and for each partition of
its topics (or of --topic) the committed offset, the high watermark, the lag
(high watermark minus committed offset, what kafka_exporter, Burrow and KEDA
report), and Orderly's commit metadata decoded: the offsets above the
committed one that are already finished (they count as lag to those tools,
but will not be handled again), and the messages waiting for a retry with
their attempt, not-before time and first failure. METADATA is orderly3,
orderly2 or orderly (decoded), - (none), foreign (not Orderly's), corrupt,
or stale (written for another offset: a consumer ignores it). A partition's MEMBER is the member it is
assigned to while the group is Stable. --json writes one JSON object, with
the finished ranges inclusive and every one of them.

Reads only: it joins nothing and commits nothing.`,
		func(ctx context.Context) error { return runDescribe(ctx, o, e) })
	fs := c.Flags()
	listVar(fs, &o.brokers, "brokers", nil, false, dialAddr, "comma-separated host:port of the Kafka cluster (required)")
	stringVar(fs, &o.group, "group", "", nonEmpty, "the consumer group (Config.GroupID) (required)")
	stringVar(fs, &o.topic, "topic", "", nonEmpty, "only this topic (default: every topic the group has committed offsets for or is assigned)")
	fs.BoolVar(&o.json, "json", false, "one JSON object, for scripts")
	o.kafka.define(fs)
	return c
}

// check is the usage check of the flags.
func (o *groupOpts) check() error {
	switch {
	case len(o.brokers) == 0:
		return usagef("orderly group describe needs --brokers HOST:PORT (the Kafka cluster)")
	case o.group == "":
		return usagef("orderly group describe needs --group GROUP (the consumer group's id)")
	}
	return o.kafka.check()
}

// runDescribe is `orderly group describe`.
func runDescribe(ctx context.Context, o *groupOpts, e env) error {
	if err := o.check(); err != nil {
		return err
	}
	v, err := untilInterrupted(ctx, "describing group "+o.group, func() (*groupView, error) { return describeGroup(o) }, nil)
	if err != nil {
		return err
	}
	if o.json {
		return writeGroupJSON(e.stdout, v)
	}
	return writeGroupText(e.stdout, v)
}
