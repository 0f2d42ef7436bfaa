package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/commit"
	"github.com/orderly-go/orderly/internal/deadletter"
	"github.com/orderly-go/orderly/internal/endoffsets"
)

var (
	// errUnknownGroup: the brokers know nothing of the group, neither
	// members nor committed offsets.
	errUnknownGroup = errors.New("no such consumer group")
	// errUnknownTopic: --topic names a topic the cluster does not have.
	errUnknownTopic = errors.New("no such topic")
)

// groupView is what `orderly group describe` reports.
type groupView struct {
	Group    string          `json:"group"`
	State    string          `json:"state"`              // Kafka's: Stable, Empty, PreparingRebalance, CompletingRebalance, Dead
	Protocol string          `json:"protocol,omitempty"` // the assignment strategy, e.g. cooperative-sticky
	Members  []memberView    `json:"members"`
	Parts    []partitionView `json:"partitions"`
	// Totals over the partitions with a committed offset.
	Lag           int64 `json:"lag"`
	FinishedAbove int64 `json:"finished_above"`
	Waiting       int   `json:"waiting"`
}

// memberView is a member of the group and what it is assigned.
type memberView struct {
	ID         string             `json:"id"`
	InstanceID string             `json:"instance_id,omitempty"` // a static member's group.instance.id
	ClientID   string             `json:"client_id"`
	Host       string             `json:"host"`
	Assigned   map[string][]int32 `json:"assigned"` // topic: partitions
	// unread: the member's assignment did not decode, so Assigned may
	// lack partitions it holds.
	unread bool
}

// partitionView is one partition as the group's commit left it.
type partitionView struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Committed is the group's committed offset; nil: none.
	Committed     *int64 `json:"committed"`
	HighWatermark int64  `json:"high_watermark"`
	// Lag is HighWatermark - Committed, as kafka_exporter, Burrow and
	// KEDA compute it; nil without a committed offset.
	Lag *int64 `json:"lag"`
	// Metadata says what the commit metadata is: "orderly3", "orderly2"
	// or "orderly" (decoded below), "" (none), "foreign" (not Orderly's), "corrupt"
	// or "stale" (Orderly's, for another offset: a consumer ignores it).
	Metadata      string `json:"metadata"`
	MetadataError string `json:"metadata_error,omitempty"`
	// FinishedAbove counts the offsets above Committed that are already
	// finished (Finished, inclusive ranges): they count as lag to the
	// tools above but will not be handled again.
	FinishedAbove int64         `json:"finished_above"`
	Finished      []offsetRange `json:"finished"`
	// Waiting are the messages waiting for a retry or a deferred
	// redelivery.
	Waiting []waitingView `json:"waiting"`
	// Member owns the partition in the group's current assignment; "":
	// none (the group is not Stable, or no member has it).
	Member string `json:"member,omitempty"`
}

// offsetRange is an inclusive range of offsets.
type offsetRange struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// waitingView is a message waiting for a redelivery.
type waitingView struct {
	Offset  int64 `json:"offset"`
	Attempt int   `json:"attempt"` // the attempt of its next delivery
	// NotBefore is when it may run again; nil: as soon as it can (it may
	// be running).
	NotBefore *millisTime `json:"not_before"`
	// FirstFailure is when it first failed, as its dead letter will say;
	// nil: it never failed (a deferral), or the metadata does not say
	// (orderly2).
	FirstFailure *millisTime `json:"first_failure"`
}

// millisTime is a time that describe writes, in text and JSON, as the
// dead-letter headers and `orderly dlq` write theirs
// (deadletter.FormatTime: UTC with three digits of milliseconds, the
// precision of the commit metadata), so that every time has one width.
type millisTime struct{ time.Time }

func (t millisTime) String() string { return deadletter.FormatTime(t.Time) }

func (t millisTime) MarshalJSON() ([]byte, error) { return json.Marshal(t.String()) }

// groupSarama is the sarama configuration of `orderly group`: it only
// reads, and fails fast when the brokers cannot be reached.
func groupSarama() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_0_0_0
	cfg.ClientID = "orderly-group"
	cfg.Net.DialTimeout = 10 * time.Second
	cfg.Metadata.Retry.Max = 1
	return cfg
}

// describeGroup asks the cluster about o.group.
func describeGroup(o *groupOpts) (*groupView, error) {
	brokers := flagArg(o.kafka.fs, "brokers", strings.Join(o.brokers, ","))
	client, err := o.kafka.newClient(o.brokers, groupSarama())
	if err != nil {
		return nil, err
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("cluster admin on %s: %w", brokers, err)
	}
	defer admin.Close() // closes the client too

	v := &groupView{Group: o.group, Members: []memberView{}, Parts: []partitionView{}}
	owner, err := v.describeMembers(admin)
	if err != nil {
		return nil, err
	}
	var topics []string
	if o.topic != "" {
		topics = []string{o.topic}
	}
	committed, err := admin.ListConsumerGroupOffsets(o.group, nil) // every topic
	switch {
	case errors.Is(err, sarama.ErrGroupIDNotFound):
		// Kafka answers an unknown group with no offsets, kfake with this.
		committed = &sarama.OffsetFetchResponse{}
	case err != nil:
		return nil, fmt.Errorf("committed offsets of group %q: %w", o.group, err)
	case committed.Err != sarama.ErrNoError:
		return nil, fmt.Errorf("committed offsets of group %q: %w", o.group, committed.Err)
	}
	if len(committed.Blocks) == 0 && len(v.Members) == 0 && (v.State == "Dead" || v.State == "") {
		return nil, fmt.Errorf("consumer group %q on %s: %w (no members, no committed offsets)", o.group, brokers, errUnknownGroup)
	}
	if topics == nil {
		set := map[string]bool{}
		for t := range committed.Blocks {
			set[t] = true
		}
		for tp := range owner {
			set[tp.Topic] = true
		}
		topics = slices.Sorted(maps.Keys(set))
	}
	parts := map[string][]int32{}
	for _, topic := range topics {
		ps, err := client.Partitions(topic)
		if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			return nil, fmt.Errorf("%s: %w", flagArg(o.kafka.fs, "topic", topic), errUnknownTopic)
		}
		if err != nil {
			return nil, fmt.Errorf("partitions of topic %s: %w", topic, err)
		}
		parts[topic] = slices.Sorted(slices.Values(ps))
	}
	hws, err := endoffsets.List(client, groupSarama().Version, parts, sarama.ReadUncommitted)
	if err != nil {
		return nil, err
	}
	for _, topic := range topics {
		for _, p := range parts[topic] {
			pv, err := v.describePartition(committed, owner, hws, topicPart{Topic: topic, Part: p})
			if err != nil {
				return nil, err
			}
			v.Parts = append(v.Parts, pv)
		}
	}
	return v, nil
}

// topicPart is a topic's partition (endoffsets.List's key).
type topicPart = endoffsets.Partition

// describeMembers fills in the group's state, protocol and members, and
// returns the owner of each assigned partition.
func (v *groupView) describeMembers(admin sarama.ClusterAdmin) (map[topicPart]string, error) {
	descs, err := admin.DescribeConsumerGroups([]string{v.Group})
	if err != nil {
		return nil, fmt.Errorf("describe consumer group %q: %w", v.Group, err)
	}
	owner := map[topicPart]string{}
	if len(descs) != 1 {
		return owner, nil
	}
	d := descs[0]
	switch {
	case errors.Is(d.Err, sarama.ErrGroupIDNotFound):
		v.State = "Dead"
		return owner, nil
	case d.Err != sarama.ErrNoError:
		return nil, fmt.Errorf("describe consumer group %q: %w", v.Group, d.Err)
	case d.ProtocolType != "" && d.ProtocolType != "consumer":
		return nil, fmt.Errorf("group %q is not a consumer group (protocol type %q)", v.Group, d.ProtocolType)
	}
	v.State, v.Protocol = d.State, d.Protocol
	ids := slices.Sorted(maps.Keys(d.Members))
	for _, id := range ids {
		m := d.Members[id]
		mv := memberView{ID: id, ClientID: m.ClientId, Host: m.ClientHost, Assigned: map[string][]int32{}}
		if m.GroupInstanceId != nil {
			mv.InstanceID = *m.GroupInstanceId
		}
		a, err := m.GetMemberAssignment()
		mv.unread = err != nil
		if err == nil && a != nil {
			for topic, parts := range a.Topics {
				parts = slices.Sorted(slices.Values(parts))
				mv.Assigned[topic] = parts
				for _, p := range parts {
					owner[topicPart{Topic: topic, Part: p}] = id
				}
			}
		}
		v.Members = append(v.Members, mv)
	}
	return owner, nil
}

// describePartition is tp as the group's commit left it.
func (v *groupView) describePartition(committed *sarama.OffsetFetchResponse, owner map[topicPart]string, hws map[topicPart]int64, tp topicPart) (partitionView, error) {
	hw := hws[tp]
	pv := partitionView{Topic: tp.Topic, Partition: tp.Part, HighWatermark: hw, Finished: []offsetRange{}, Waiting: []waitingView{},
		Member: owner[tp]}
	b := committed.GetBlock(tp.Topic, tp.Part)
	switch {
	case b == nil || b.Err == sarama.ErrNoError && b.Offset < 0:
		return pv, nil // no commit
	case b.Err != sarama.ErrNoError:
		return pv, fmt.Errorf("committed offset of group %q at %s/%d: %w", v.Group, tp.Topic, tp.Part, b.Err)
	}
	off := b.Offset
	lag := max(hw-off, 0)
	pv.Committed, pv.Lag = &off, &lag
	pv.decodeMeta(b.Metadata, hw)
	v.Lag += lag
	v.FinishedAbove += pv.FinishedAbove
	v.Waiting += len(pv.Waiting)
	return pv, nil
}

// decodeMeta decodes the commit metadata of pv's committed offset, up to
// the high watermark hw: what it lists at or above hw is noted, not shown,
// as a consumer ignores it (no record was written there).
func (pv *partitionView) decodeMeta(meta string, hw int64) {
	if meta == "" {
		return
	}
	done, err := commit.DecodeMeta(meta)
	switch {
	case errors.Is(err, commit.ErrNotOrderlyMetadata):
		pv.Metadata = "foreign"
		return
	case err != nil:
		pv.Metadata, pv.MetadataError = "corrupt", err.Error()
		return
	case done.Base != *pv.Committed:
		pv.Metadata = "stale"
		pv.MetadataError = fmt.Sprintf("written for offset %d, not the committed %d: a consumer ignores it", done.Base, *pv.Committed)
		return
	}
	switch {
	case strings.HasPrefix(meta, commit.MetaPrefix3):
		pv.Metadata = "orderly3"
	case strings.HasPrefix(meta, commit.MetaPrefix2):
		pv.Metadata = "orderly2"
	default:
		pv.Metadata = "orderly"
	}
	if finished, waiting := done.DropFrom(hw); finished > 0 || waiting > 0 {
		pv.MetadataError = fmt.Sprintf("lists %d finished offsets and %d waiting messages at or above the high watermark %d: a consumer ignores them", finished, waiting, hw)
	}
	for _, r := range done.Ranges {
		pv.Finished = append(pv.Finished, offsetRange{From: r.Start, To: r.End - 1})
	}
	pv.FinishedAbove = done.Count()
	for _, w := range done.Waiting {
		wv := waitingView{Offset: w.Offset, Attempt: w.Attempt}
		if !w.NotBefore.IsZero() {
			wv.NotBefore = &millisTime{w.NotBefore}
		}
		if !w.FirstFailure.IsZero() {
			wv.FirstFailure = &millisTime{w.FirstFailure}
		}
		pv.Waiting = append(pv.Waiting, wv)
	}
}
