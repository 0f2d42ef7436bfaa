package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/deadletter"
)

// topicReads counts, at a broker, what the dlq commands ask of a topic:
// each partition's ListOffsets asks by what they ask for (log start, high
// watermark, last stable offset), and each partition's fetches from
// offset 0, its first record (the fixtures' topics start there).
type topicReads struct {
	mu sync.Mutex
	n  map[string]int
}

// countReads counts what is asked of topic at b until the test ends.
// Fetches are counted whatever topic they name (a fetch may name it by
// its ID): the commands fetch no other topic.
func countReads(t *testing.T, b *broker.Broker, topic string) *topicReads {
	t.Helper()
	r := &topicReads{n: map[string]int{}}
	c := b.Cluster()
	c.ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		lo := req.(*kmsg.ListOffsetsRequest)
		for _, rt := range lo.Topics {
			for _, p := range rt.Partitions {
				what := fmt.Sprintf("timestamp %d", p.Timestamp)
				switch {
				case rt.Topic != topic:
					continue
				case p.Timestamp == sarama.OffsetOldest:
					what = "log start"
				case p.Timestamp == sarama.OffsetNewest && lo.IsolationLevel == 1:
					what = "last stable"
				case p.Timestamp == sarama.OffsetNewest:
					what = "high watermark"
				}
				r.add(fmt.Sprintf("p%d %s", p.Partition, what))
			}
		}
		return nil, nil, false
	})
	c.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, rt := range req.(*kmsg.FetchRequest).Topics {
			for _, p := range rt.Partitions {
				if p.FetchOffset == 0 {
					r.add(fmt.Sprintf("p%d fetch from 0", p.Partition))
				}
			}
		}
		return nil, nil, false
	})
	return r
}

func (r *topicReads) add(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[key]++
}

// take returns the counts so far and starts again from none.
func (r *topicReads) take() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.n
	r.n = map[string]int{}
	return n
}

// check takes the counts and fails t for each that is not want's.
func (r *topicReads) check(t *testing.T, topic string, args []string, want map[string]int) {
	t.Helper()
	got := r.take()
	all := maps.Clone(got)
	maps.Copy(all, want)
	for _, k := range slices.Sorted(maps.Keys(all)) {
		if got[k] != want[k] {
			t.Errorf("orderly %q: %s of %s: got %d, want %d", args, k, topic, got[k], want[k])
		}
	}
}

// asks is the counts of keys in partitions parts, n each.
func asks(n int, parts []int32, keys ...string) map[string]int {
	m := map[string]int{}
	for _, p := range parts {
		for _, k := range keys {
			m[fmt.Sprintf("p%d %s", p, k)] = n
		}
	}
	return m
}

// TestDlqReadsOnce: each dlq command on a dead-letter topic reads it
// once: one lookup of each partition's log start and high watermark, one
// fetch of its first record; the check that refuses an ordinary topic is
// that read's first records, not a read of its own. purge looks its
// partitions' offsets up once for the check and the deletion, and after a
// deletion only the log start it prints.
func TestDlqReadsOnce(t *testing.T) {
	f := newDlqFixture(t)
	reads := countReads(t, f.b, "orders-dlq")
	both := []int32{0, 1}
	oneRead := asks(1, both, "log start", "high watermark", "fetch from 0")
	// purge's check ends at orders-dlq/0's first record, a dead letter.
	purgeDry := asks(1, both, "log start", "high watermark", "last stable")
	purgeDry["p0 fetch from 0"] = 1
	purge := maps.Clone(purgeDry)
	maps.Copy(purge, asks(2, both, "log start"))
	tests := []struct {
		name string
		args []string
		want map[string]int
	}{
		{"list", []string{"list"}, oneRead},
		{"list --json", []string{"list", "--json"}, oneRead},
		{"show", []string{"show"}, oneRead},
		{"replay --to --dry-run", []string{"replay", "--to", "orders-retry", "--dry-run"}, oneRead},
		{"replay --to", []string{"replay", "--to", "orders-retry"}, oneRead},
		{"purge --dry-run", []string{"purge", "--dry-run"}, purgeDry},
		{"purge --yes", []string{"purge", "--yes"}, purge}, // last: it empties the topic
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reads.take()
			args := append(append([]string{"dlq"}, tt.args...), f.kafka()...)
			if out, stderr, err := runCmd2(context.Background(), args...); err != nil {
				t.Fatalf("orderly %q: got error %v, want none\nstdout:\n%s\nstderr:\n%s", args, err, out, stderr)
			}
			reads.check(t, "orders-dlq", args, tt.want)
		})
	}
}

// TestDlqPurgePartitionChecked: purge --partition P decides from P's
// records whether the topic holds dead letters, and asks nothing of its
// other partitions when P holds one. A P of strays alone (records
// someone else produced to the dead-letter topic) was refused as "not a
// dead-letter topic", with no way to purge it: now the other partitions'
// first records decide, and a dead letter there lets P be purged. Here
// partition 0 holds one ordinary record, 1 dead letters, 2 maxStrayCheck
// ordinary records. (TestDlqOrdinaryTopic: a topic with no dead letter is
// refused.)
func TestDlqPurgePartitionChecked(t *testing.T) {
	f := newDlqFixture(t)
	if err := f.b.CreateTopic("mixed", 3); err != nil {
		t.Fatal(err)
	}
	p, err := sarama.NewSyncProducer([]string{f.addr}, dlqSarama())
	if err != nil {
		t.Fatal(err)
	}
	ordinary := deadletter.Record{Key: []byte("k"), Value: []byte("v"), Timestamp: f.now}
	msgs := []*sarama.ProducerMessage{
		producerMessage("mixed", 0, ordinary),
		producerMessage("mixed", 1, f.cases[0].dead()),
		producerMessage("mixed", 1, f.cases[1].dead()),
	}
	for range maxStrayCheck {
		msgs = append(msgs, producerMessage("mixed", 2, ordinary))
	}
	if err := p.SendMessages(msgs); err != nil {
		t.Fatal(err)
	}
	p.Close()
	reads := countReads(t, f.b, "mixed")
	// What a purge of partition p alone asks: its offsets once, its
	// first record; and its log start again after a deletion.
	checked := func(p int32) map[string]int {
		return asks(1, []int32{p}, "log start", "high watermark", "last stable", "fetch from 0")
	}
	deleted := func(p int32, more ...map[string]int) map[string]int {
		m := checked(p)
		m[fmt.Sprintf("p%d log start", p)] = 2
		for _, o := range more {
			maps.Copy(m, o)
		}
		return m
	}
	// The other partitions: each one's offsets, partition 1's first
	// record (a dead letter: the read ends there).
	others := func(parts ...int32) map[string]int {
		m := asks(1, parts, "log start", "high watermark")
		m["p1 fetch from 0"] = 1
		return m
	}
	tests := []struct {
		name      string
		args      []string
		stdout    string // all of it
		reads     map[string]int
		logStarts map[int32]int64 // after the run
	}{
		{"dead letters, --dry-run", []string{"--partition", "1", "--dry-run"},
			"mixed/1: would delete 2 records (offsets 0 to 1)\n", checked(1), map[int32]int64{0: 0, 1: 0, 2: 0}},
		{"one ordinary record", []string{"--partition", "0", "--yes"},
			"mixed/0: deleting 1 record (offsets 0 to 0)\nmixed/0: log start offset now 1\n", deleted(0, others(1, 2)), map[int32]int64{0: 1, 1: 0, 2: 0}},
		{"ordinary records", []string{"--partition", "2", "--yes"},
			fmt.Sprintf("mixed/2: deleting %d records (offsets 0 to %d)\nmixed/2: log start offset now %d\n", maxStrayCheck, maxStrayCheck-1, maxStrayCheck),
			deleted(2, others(0, 1)), map[int32]int64{0: 1, 1: 0, 2: maxStrayCheck}},
		{"dead letters", []string{"--partition", "1", "--yes"},
			"mixed/1: deleting 2 records (offsets 0 to 1)\nmixed/1: log start offset now 2\n", deleted(1), map[int32]int64{0: 1, 1: 2, 2: maxStrayCheck}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reads.take()
			args := append([]string{"dlq", "purge", "--brokers", f.addr, "--topic", "mixed"}, tt.args...)
			out, stderr, err := runCmd2(context.Background(), args...)
			switch {
			case err != nil:
				t.Fatalf("orderly %q: got error %v, want none\nstdout:\n%s\nstderr:\n%s", args, err, out, stderr)
			case out != tt.stdout:
				t.Errorf("orderly %q: got stdout:\n%s\nwant:\n%s", args, out, tt.stdout)
			}
			reads.check(t, "mixed", args, tt.reads)
			if got := f.b.LogStartOffsets("mixed"); !maps.Equal(got, tt.logStarts) {
				t.Errorf("orderly %q: mixed's log start offsets: got %v, want %v", args, got, tt.logStarts)
			}
		})
	}
}

// saramaClients counts, at a broker, what sarama clients ask: the
// connections they open (each starts with an ApiVersions request naming
// sarama) and the clients themselves (each starts with a Metadata request
// for every topic; franz-go's, which the dlq commands read topics with,
// names its topics).
type saramaClients struct {
	mu             sync.Mutex
	conns, clients int
}

func countClients(t *testing.T, b *broker.Broker) *saramaClients {
	t.Helper()
	s := &saramaClients{}
	c := b.Cluster()
	c.ControlKey(kmsg.ApiVersions.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if req.(*kmsg.ApiVersionsRequest).ClientSoftwareName == "sarama" {
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
		}
		return nil, nil, false
	})
	c.ControlKey(kmsg.Metadata.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if req.(*kmsg.MetadataRequest).Topics == nil {
			s.mu.Lock()
			s.clients++
			s.mu.Unlock()
		}
		return nil, nil, false
	})
	return s
}

// take returns "N clients, M connections" of sarama so far, and starts
// again from none.
func (s *saramaClients) take() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := fmt.Sprintf("%s, %s", plural(s.clients, "sarama client"), plural(s.conns, "sarama connection"))
	s.conns, s.clients = 0, 0
	return got
}

// TestDlqReplayOneClient: replay reads a dead-letter topic and publishes
// what it selected with one sarama client, as list reads with one: it
// dialed a second to publish (and a dry run, to look up the partitions
// of --to).
func TestDlqReplayOneClient(t *testing.T) {
	f := newDlqFixture(t)
	clients := countClients(t, f.b)
	const one = "1 sarama client, 2 sarama connections" // the seed broker's, and broker 0's
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"list", slices.Concat([]string{"list"}, f.kafka()), one},
		{"replay --to --dry-run", slices.Concat([]string{"replay", "--to", "orders-retry", "--dry-run"}, f.kafka()), one},
		{"replay --to", slices.Concat([]string{"replay", "--to", "orders-retry"}, f.kafka()), one},
		{"replay of dead letters", slices.Concat([]string{"replay", "--origin-topic", "orders"}, f.kafka()), one},
		{"replay of a local store", slices.Concat([]string{"replay", "--origin-topic", "orders", "--brokers", f.addr}, f.local()), one},
		{"replay of nothing from a local store", slices.Concat([]string{"replay", "--origin-topic", "none", "--brokers", f.addr}, f.local()), "0 sarama clients, 0 sarama connections"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clients.take()
			args := append([]string{"dlq"}, tt.args...)
			if out, stderr, err := runCmd2(context.Background(), args...); err != nil {
				t.Fatalf("orderly %q: got error %v, want none\nstdout:\n%s\nstderr:\n%s", args, err, out, stderr)
			}
			if got := clients.take(); got != tt.want {
				t.Errorf("orderly %q: got %s, want %s", args, got, tt.want)
			}
		})
	}
}
