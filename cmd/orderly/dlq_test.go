package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/deadletter"
)

// A dead letter of the fixture: its origin and content, and which of the
// dead-letter topic's partitions it is produced to.
type dlqCase struct {
	name    string // d0..d5, kept in the key-less cases' trace header
	info    deadletter.Info
	rec     deadletter.Record // the original: key, value, headers, timestamp
	foreign bool              // not a dead letter: no __orderly.errors.* headers
	dlqPart int32
}

// dlqFixture is a broker with an origin topic "orders" (4 partitions) and a
// dead-letter topic "orders-dlq" (2 partitions) holding the cases, and a
// DataPath whose local store holds the same records.
type dlqFixture struct {
	b     *broker.Broker
	addr  string
	data  string
	cases []dlqCase
	now   time.Time
}

func (f *dlqFixture) kafka() []string { return []string{"--brokers", f.addr, "--topic", "orders-dlq"} }
func (f *dlqFixture) local() []string { return []string{"--data", f.data} }

func dlqCases(now time.Time) []dlqCase {
	at := func(ago time.Duration) time.Time { return now.Add(-ago).Truncate(time.Millisecond).UTC() }
	in := func(part int32, off int64, reason string, attempts int, ago time.Duration, msg string) deadletter.Info {
		return deadletter.Info{Topic: "orders", Partition: part, Offset: off, Timestamp: at(ago), Group: "ledger",
			Attempts: attempts, Reason: reason, Message: msg, FirstFailure: at(ago + time.Minute)}
	}
	trace := func(name string) []deadletter.Header {
		return []deadletter.Header{{Key: []byte("trace"), Value: []byte(name)}}
	}
	return []dlqCase{
		{name: "d0", info: in(0, 10, deadletter.ReasonMaxAttempts, 3, 3*time.Hour, "insert: deadlock detected"),
			rec: deadletter.Record{Key: []byte("acct-1"), Value: []byte(`{"amount":10}`), Headers: trace("d0"), Timestamp: at(4 * time.Hour)}},
		{name: "d1", info: in(1, 20, deadletter.ReasonPoison, 1, 2*time.Hour, "decode: unexpected EOF"), dlqPart: 1,
			rec: deadletter.Record{Key: nil, Value: []byte{0xff, 0x00, 0xfe}, Headers: trace("d1"), Timestamp: at(5 * time.Hour)}},
		{name: "d2", info: in(1, 25, deadletter.ReasonRejected, 2, 90*time.Minute, "rejected by the handler"),
			rec: deadletter.Record{Key: []byte("acct-2"), Value: nil, Timestamp: at(6 * time.Hour),
				// A dead letter that was replayed and failed again: its old
				// __orderly.errors.* headers must not come back.
				Headers: append(trace("d2"), deadletter.Header{Key: []byte(deadletter.HeaderReason), Value: []byte("poison")})}},
		{name: "d3", info: in(2, 30, deadletter.ReasonTimeout, 4, 30*time.Minute, "Do ran past MsgTimeout"), dlqPart: 1,
			rec: deadletter.Record{Key: []byte{}, Value: []byte{}, Headers: trace("d3"), Timestamp: at(7 * time.Hour)}},
		{name: "d4", info: in(3, 40, deadletter.ReasonMaxAttempts, 5, 10*time.Minute, strings.Repeat("stack frame\n", 200)),
			rec: deadletter.Record{Key: []byte("acct-3"), Value: []byte("v4"), Headers: trace("d4"), Timestamp: at(8 * time.Hour)}},
		{name: "d5", foreign: true, dlqPart: 1,
			rec: deadletter.Record{Key: []byte("stray"), Value: []byte("produced by someone else"), Headers: trace("d5"), Timestamp: at(time.Hour)}},
	}
}

// dead is c's dead-letter record.
func (c dlqCase) dead() deadletter.Record {
	r := c.rec
	if !c.foreign {
		r.Headers = deadletter.Headers(c.rec.Headers, c.info)
	}
	return r
}

func newDlqFixture(t *testing.T) *dlqFixture {
	t.Helper()
	b, err := broker.Start(broker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	for topic, n := range map[string]int32{"orders": 4, "orders-dlq": 2, "orders-retry": 3} {
		if err := b.CreateTopic(topic, n); err != nil {
			t.Fatal(err)
		}
	}
	f := &dlqFixture{b: b, addr: b.Addrs()[0], data: t.TempDir(), now: time.Now()}
	f.cases = dlqCases(f.now)

	cfg := dlqSarama()
	p, err := sarama.NewSyncProducer(b.Addrs(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	store, err := deadletter.Open(storeDir(f.data), deadletter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, c := range f.cases {
		r := c.dead()
		if err := p.SendMessages([]*sarama.ProducerMessage{producerMessage("orders-dlq", c.dlqPart, r)}); err != nil {
			t.Fatal(err)
		}
		if err := store.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// producerMessage is r as sarama produces it: nil stays null.
func producerMessage(topic string, part int32, r deadletter.Record) *sarama.ProducerMessage {
	m := &sarama.ProducerMessage{Topic: topic, Partition: part, Timestamp: r.Timestamp}
	if r.Key != nil {
		m.Key = sarama.ByteEncoder(r.Key)
	}
	if r.Value != nil {
		m.Value = sarama.ByteEncoder(r.Value)
	}
	for _, h := range r.Headers {
		m.Headers = append(m.Headers, sarama.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return m
}

// dlqRun runs `orderly dlq args` in-process and fails the test on an
// error; it returns stdout.
func dlqRun(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, err := runCmd2(context.Background(), append([]string{"dlq"}, args...)...)
	if err != nil {
		t.Fatalf("orderly dlq %q: %v\nstdout:\n%s\nstderr:\n%s", args, err, out, stderr)
	}
	return out
}

// jsonLines decodes one JSON object per line.
func jsonLines[T any](t *testing.T, out string) []T {
	t.Helper()
	var recs []T
	for line := range strings.Lines(out) {
		var r T
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// names are the fixture cases that a list --json printed, by the origin
// offsets (d5, not a dead letter, as "d5").
func (f *dlqFixture) names(t *testing.T, out string) []string {
	t.Helper()
	var names []string
	for _, j := range jsonLines[entryJSON](t, out) {
		name := "?"
		for _, c := range f.cases {
			if c.foreign && j.NotDeadLetter != "" || !c.foreign && j.NotDeadLetter == "" && c.info.Offset == j.Offset {
				name = c.name
			}
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// TestDlqList: the table and --json of both sources, and every filter.
func TestDlqList(t *testing.T) {
	f := newDlqFixture(t)
	for _, src := range []struct {
		name string
		args []string
	}{{"local", f.local()}, {"kafka", f.kafka()}} {
		t.Run(src.name, func(t *testing.T) {
			r := runBin(t, nil, append([]string{"dlq", "list"}, src.args...)...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("list: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
			}
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			if len(lines) != 8 || !strings.HasPrefix(lines[0], "TOPIC ") || !strings.Contains(lines[0], "  DEAD-LETTERED  ") ||
				!strings.HasPrefix(lines[7], "5 of 5 dead letters and 1 of 1 other record in ") {
				t.Fatalf("list: want a header, 6 rows and a count:\n%s", r.stdout)
			}
			d0 := f.cases[0].info
			for _, want := range []string{
				strings.Join(strings.Fields(fmt.Sprintf("orders 0 10 max_attempts 3 %s 19 B insert: deadlock detected", deadletter.FormatTime(d0.Timestamp))), " "),
				"orders 1 20 poison 1 " + deadletter.FormatTime(f.cases[1].info.Timestamp) + " 3 B decode: unexpected EOF",
				"orders 3 40 max_attempts 5 " + deadletter.FormatTime(f.cases[4].info.Timestamp) + " 8 B stack frame stack frame",
				"- - - - - - 29 B not a dead letter: deadletter: no __orderly.errors.* headers",
			} {
				found := false
				for _, l := range lines {
					found = found || strings.HasPrefix(strings.Join(strings.Fields(l), " "), want)
				}
				if !found {
					t.Errorf("list has no line %q:\n%s", want, r.stdout)
				}
			}

			js := jsonLines[entryJSON](t, dlqRun(t, append([]string{"list", "--json"}, src.args...)...))
			if len(js) != 6 {
				t.Fatalf("list --json: %d lines, want 6", len(js))
			}
			d4 := js[slices.IndexFunc(js, func(j entryJSON) bool { return j.Offset == 40 })]
			if d4.Topic != "orders" || d4.Partition != 3 || d4.Reason != deadletter.ReasonMaxAttempts || d4.Attempts != 5 ||
				d4.Group != "ledger" || len(d4.Error) > deadletter.MaxMessage || !strings.HasSuffix(d4.Error, "…") ||
				d4.DeadLetteredAt != deadletter.FormatTime(f.cases[4].info.Timestamp) || d4.Size != 8 {
				t.Errorf("list --json, d4: %+v", d4)
			}
			if (src.name == "local") != (d4.StorePosition != nil) || (src.name == "kafka") != (d4.DLQPartition != nil && d4.DLQOffset != nil) {
				t.Errorf("list --json, d4 says it is at %v / %v / %v", d4.StorePosition, d4.DLQPartition, d4.DLQOffset)
			}

			rfc := func(ago time.Duration) string { return f.now.Add(-ago).UTC().Format(time.RFC3339) }
			for _, tt := range []struct {
				filter []string
				want   []string
			}{
				{nil, []string{"d0", "d1", "d2", "d3", "d4", "d5"}},
				{[]string{"--reason", "poison"}, []string{"d1"}},
				{[]string{"--reason", "max_attempts"}, []string{"d0", "d4"}},
				{[]string{"--origin-topic", "orders"}, []string{"d0", "d1", "d2", "d3", "d4"}},
				{[]string{"--origin-topic", "payments"}, nil},
				{[]string{"--partition", "1"}, []string{"d1", "d2"}},
				{[]string{"--partition", "0"}, []string{"d0"}},
				{[]string{"--from-offset", "20", "--to-offset", "30"}, []string{"d1", "d2", "d3"}},
				{[]string{"--from-offset", "26"}, []string{"d3", "d4"}},
				{[]string{"--to-offset", "25"}, []string{"d0", "d1", "d2"}},
				{[]string{"--since", "100m"}, []string{"d2", "d3", "d4"}},
				{[]string{"--until", "1h"}, []string{"d0", "d1", "d2"}},
				{[]string{"--since", rfc(150 * time.Minute), "--until", rfc(20 * time.Minute)}, []string{"d1", "d2", "d3"}},
				{[]string{"--partition", "1", "--reason", "rejected"}, []string{"d2"}},
				// At d2's dead-letter time exactly: --since takes it, --until not.
				{[]string{"--since", deadletter.FormatTime(f.cases[2].info.Timestamp)}, []string{"d2", "d3", "d4"}},
				{[]string{"--until", deadletter.FormatTime(f.cases[2].info.Timestamp)}, []string{"d0", "d1"}},
			} {
				got := f.names(t, dlqRun(t, slices.Concat([]string{"list", "--json"}, src.args, tt.filter)...))
				if !slices.Equal(got, tt.want) {
					t.Errorf("list %q: got %v, want %v", tt.filter, got, tt.want)
				}
			}
		})
	}
}

// TestDlqShow: every header, the key and value as text or base64, null
// and empty kept apart, through both sources.
func TestDlqShow(t *testing.T) {
	f := newDlqFixture(t)
	for _, src := range [][]string{f.local(), f.kafka()} {
		out := dlqRun(t, append([]string{"show", "--partition", "1"}, src...)...)
		for _, want := range []string{
			"dead letter of orders/1 offset 20 (",
			"  reason:         poison\n",
			"  key:            (null)\n",
			"  value:          base64:/wD+ (3 bytes, not UTF-8)\n",
			"  value:          (null)\n",            // d2, a tombstone
			"    trace: d2\n",                       // the original header
			"    __orderly.errors.reason: rejected", // the new one; the stale "poison" is gone
			"2 of 5 dead letters and 0 of 1 other record in ",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("show %q lacks %q:\n%s", src, want, out)
			}
		}
		if n := strings.Count(out, "__orderly.errors.reason"); n != 2 {
			t.Errorf("show: %d reason headers for 2 dead letters:\n%s", n, out)
		}
		js := jsonLines[showJSON](t, dlqRun(t, append([]string{"show", "--json", "--origin-topic", "orders"}, src...)...))
		byOffset := map[int64]showJSON{}
		for _, j := range js {
			byOffset[j.Offset] = j
		}
		d1, d2, d3 := byOffset[20], byOffset[25], byOffset[30]
		if d1.Key != nil || d1.Value == nil || *d1.Value != "/wD+" || !d1.ValueBase64 {
			t.Errorf("show --json d1: key %v, value %v (base64 %v); want null and base64 /wD+", d1.Key, d1.Value, d1.ValueBase64)
		}
		if d2.Value != nil || d2.Key == nil || *d2.Key != "acct-2" || d2.KeyBase64 {
			t.Errorf("show --json d2: key %v, value %v; want acct-2 and null", d2.Key, d2.Value)
		}
		if d3.Key == nil || *d3.Key != "" || d3.Value == nil || *d3.Value != "" {
			t.Errorf("show --json d3: key %v, value %v; want both empty, not null", d3.Key, d3.Value)
		}
		if len(d1.Headers) != 1+9 || d1.Headers[0].Key != "trace" || d1.Headers[1].Key != deadletter.HeaderTopic {
			t.Errorf("show --json d1 headers: %+v", d1.Headers)
		}
		if d1.Timestamp != deadletter.FormatTime(f.cases[1].rec.Timestamp) {
			t.Errorf("show --json d1 timestamp %s, want the original %s", d1.Timestamp, deadletter.FormatTime(f.cases[1].rec.Timestamp))
		}
	}
}

// consumed is what a topic partition holds from offset from on.
func consumed(t *testing.T, addr, topic string, part int32, from int64) []deadletter.Record {
	t.Helper()
	client := saramaClient(t, addr)
	defer client.Close()
	var out []deadletter.Record
	if err := readPartitionFrom(t, client, topic, part, from, func(e *entry) error { out = append(out, e.rec); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func readPartitionFrom(t *testing.T, client sarama.Client, topic string, part int32, from int64, fn func(*entry) error) error {
	t.Helper()
	high, err := client.GetOffset(topic, part, sarama.OffsetNewest)
	if err != nil || high <= from {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return readSpans(ctx, &dlqOpts{brokers: []string{client.Brokers()[0].Addr()}, topic: topic}, []span{{part, from, high}}, io.Discard, fn)
}

// TestDlqReplay: replayed records arrive on their origin partition (or
// --to's, by key) with the original key, value, headers (none of the
// __orderly.errors.* ones) and timestamp; a dry run publishes nothing.
func TestDlqReplay(t *testing.T) {
	f := newDlqFixture(t)
	hw := f.b.HighWatermarks("orders")
	want := func(names ...string) map[int32][]deadletter.Record {
		out := map[int32][]deadletter.Record{}
		for _, c := range f.cases {
			if slices.Contains(names, c.name) {
				r := c.rec
				r.Headers = deadletter.Original(r.Headers)
				out[c.info.Partition] = append(out[c.info.Partition], r)
			}
		}
		return out
	}
	check := func(what string, want map[int32][]deadletter.Record) {
		t.Helper()
		for p := range int32(4) {
			got := consumed(t, f.addr, "orders", p, hw[p])
			if len(got) != len(want[p]) {
				t.Fatalf("%s: orders/%d got %d records, want %d", what, p, len(got), len(want[p]))
			}
			for i, w := range want[p] {
				if g := got[i]; !bytes.Equal(g.Key, w.Key) || (g.Key == nil) != (w.Key == nil) ||
					!bytes.Equal(g.Value, w.Value) || (g.Value == nil) != (w.Value == nil) ||
					!slices.EqualFunc(g.Headers, w.Headers, func(a, b deadletter.Header) bool { return bytes.Equal(a.Key, b.Key) && bytes.Equal(a.Value, b.Value) }) ||
					!g.Timestamp.Equal(w.Timestamp) {
					t.Errorf("%s: orders/%d record %d is\n%+v\nwant\n%+v", what, p, i, g, w)
				}
			}
		}
	}

	out := dlqRun(t, slices.Concat([]string{"replay", "--dry-run", "--reason", "max_attempts"}, f.kafka())...)
	if !strings.Contains(out, "would replay 2 of 2 selected dead letters from topic orders-dlq: orders/0 1, orders/3 1") {
		t.Errorf("replay --dry-run: %s", out)
	}
	if got := f.b.HighWatermarks("orders"); !maps.Equal(got, hw) {
		t.Fatalf("a dry run published: high watermarks %v, were %v", got, hw)
	}

	out = dlqRun(t, slices.Concat([]string{"replay", "--reason", "max_attempts"}, f.kafka())...)
	if !strings.Contains(out, "replayed 2 of 2 selected dead letters from topic orders-dlq: orders/0 1, orders/3 1") {
		t.Errorf("replay: %s", out)
	}
	check("replay from the topic", want("d0", "d4"))

	// From the local store: a null key, a binary value, a tombstone.
	out = dlqRun(t, slices.Concat([]string{"replay", "--partition", "1", "--brokers", f.addr}, f.local())...)
	if !strings.Contains(out, "replayed 2 of 2 selected dead letters from "+storeDir(f.data)+": orders/1 2") {
		t.Errorf("replay: %s", out)
	}
	check("replay from the store", want("d0", "d4", "d1", "d2"))

	// --to: by key, onto another topic.
	out = dlqRun(t, slices.Concat([]string{"replay", "--to", "orders-retry", "--reason", "timeout", "--brokers", f.addr}, f.local())...)
	if !strings.Contains(out, "replayed 1 of 1 selected dead letter") || !strings.Contains(out, "orders-retry/") {
		t.Errorf("replay --to: %s", out)
	}
	if n := sumValues(f.b.HighWatermarks("orders-retry")); n != 1 {
		t.Errorf("orders-retry holds %d records, want 1", n)
	}

	// A record that is not a dead letter has no origin: not replayed, and
	// the command says so and fails.
	_, stderr, err := runCmd2(context.Background(), slices.Concat([]string{"dlq", "replay", "--dry-run"}, f.local())...)
	if err == nil || !strings.Contains(err.Error(), "1 selected record not replayed: not dead letters") || !strings.Contains(stderr, "warning: not replayed: store position") {
		t.Errorf("replay of a foreign record: %v\n%s", err, stderr)
	}
}

func sumValues(m map[int32]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// TestDlqPurgeKafka: DeleteRecords moves the log start offsets: one
// partition's prefix, then everything.
func TestDlqPurgeKafka(t *testing.T) {
	f := newDlqFixture(t)
	hw := f.b.HighWatermarks("orders-dlq") // 3 records in each
	out := dlqRun(t, slices.Concat([]string{"purge", "--dry-run"}, f.kafka())...)
	if !strings.Contains(out, "orders-dlq/0: would delete 3 records (offsets 0 to 2)") ||
		!strings.Contains(out, "orders-dlq/1: would delete 3 records (offsets 0 to 2)") {
		t.Errorf("purge --dry-run: %s", out)
	}
	if got := f.b.LogStartOffsets("orders-dlq"); got[0] != 0 || got[1] != 0 {
		t.Fatalf("a dry run deleted: log start offsets %v", got)
	}
	out = dlqRun(t, slices.Concat([]string{"purge", "--yes", "--partition", "1", "--before", "2"}, f.kafka())...)
	if got := f.b.LogStartOffsets("orders-dlq"); got[0] != 0 || got[1] != 2 || !strings.Contains(out, "orders-dlq/1: log start offset now 2") {
		t.Fatalf("purge --partition 1 --before 2: log start offsets %v\n%s", got, out)
	}
	if js := jsonLines[entryJSON](t, dlqRun(t, slices.Concat([]string{"list", "--json"}, f.kafka())...)); len(js) != 4 {
		t.Errorf("after deleting 2 records, list shows %d of 6", len(js))
	}
	dlqRun(t, slices.Concat([]string{"purge", "--yes"}, f.kafka())...)
	if got := f.b.LogStartOffsets("orders-dlq"); !maps.Equal(got, hw) {
		t.Fatalf("purge --yes: log start offsets %v, want the high watermarks %v", got, hw)
	}
	if out := dlqRun(t, slices.Concat([]string{"list"}, f.kafka())...); !strings.Contains(out, "0 of 0 dead letters") {
		t.Errorf("list after purge: %s", out)
	}
}

// TestDlqPurgeLocal: the selected records go, the rest stay; a store a
// consumer (here: this test process) holds is refused by name, as a
// runtime error of the separate orderly process.
func TestDlqPurgeLocal(t *testing.T) {
	f := newDlqFixture(t)
	out := dlqRun(t, slices.Concat([]string{"purge", "--dry-run", "--reason", "max_attempts"}, f.local())...)
	if !strings.Contains(out, "would remove 2 of 5 dead letters and 0 of 1 other record from "+storeDir(f.data)+"\n") {
		t.Errorf("purge --dry-run: %s", out)
	}
	out = dlqRun(t, slices.Concat([]string{"purge", "--yes", "--reason", "max_attempts"}, f.local())...)
	if !strings.Contains(out, "removed 2 dead letters and 0 other records from "+storeDir(f.data)+", 4 left\n") {
		t.Errorf("purge --reason: %s", out)
	}
	if got := f.names(t, dlqRun(t, slices.Concat([]string{"list", "--json"}, f.local())...)); !slices.Equal(got, []string{"d1", "d2", "d3", "d5"}) {
		t.Errorf("after purging max_attempts: %v", got)
	}

	// A consumer holds the store.
	held, err := deadletter.Open(storeDir(f.data), deadletter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := runBin(t, nil, slices.Concat([]string{"dlq", "purge", "--yes"}, f.local())...)
	held.Close()
	if r.code != exitError || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, storeDir(f.data)+" is in use") ||
		!strings.Contains(r.stderr, fmt.Sprintf("process %d", os.Getpid())) || !strings.Contains(r.stderr, "stop that consumer") {
		t.Errorf("purge beside a consumer: exit %d, stderr %q; want exit 1, one line naming the store and its holder", r.code, r.stderr)
	}
	if got := f.names(t, dlqRun(t, slices.Concat([]string{"list", "--json"}, f.local())...)); len(got) != 4 {
		t.Errorf("a refused purge removed something: %v left", got)
	}

	out = dlqRun(t, slices.Concat([]string{"purge", "--yes"}, f.local())...)
	if want := "removed 3 dead letters and 1 other record from " + storeDir(f.data) + ", 0 left\n"; out != want {
		t.Errorf("purge --yes: got %q, want %q", out, want)
	}
	if fi, err := os.Stat(filepath.Join(storeDir(f.data), deadletter.DataFile)); err != nil || fi.Size() != 16 {
		t.Errorf("after purging all, the store file: %v, %v", fi, err)
	}
}

// TestDlqErrors: usage mistakes are one line and a hint, exit 2; runtime
// errors one line, exit 1.
func TestDlqErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nosuch")
	tests := []struct {
		args []string
		code int
		want string // in the first line, after "orderly: "
	}{
		{[]string{"dlq"}, exitUsage, "orderly dlq needs a command: list, show, replay or purge"},
		{[]string{"dlq", "lst"}, exitUsage, `unknown command "lst" (did you mean "list"?)`},
		{[]string{"dlq", "list"}, exitUsage, "no source: give --data DIR (a consumer's DataPath) or --brokers HOST:PORT --topic TOPIC"},
		{[]string{"dlq", "show", "--data", "/d", "--topic", "t", "--brokers", "h:1"}, exitUsage, "give one source: --data /d or --topic t, not both"},
		{[]string{"dlq", "list", "--topic", "t"}, exitUsage, "--topic t needs --brokers (the cluster it is on)"},
		{[]string{"dlq", "list", "--data", "/d", "--since", "yesterday"}, exitUsage, `invalid value "yesterday" for --since: not a time (RFC 3339, e.g. 2026-01-02T15:04:05Z) or a duration ago (e.g. 2h, 30m)`},
		{[]string{"dlq", "list", "--data", "/d", "--since", "-2h"}, exitUsage, `invalid value "-2h" for --since: a duration ago must not be negative`},
		{[]string{"dlq", "list", "--data", "/d", "--since", "1h", "--until", "2h"}, exitUsage, "is not before --until"},
		{[]string{"dlq", "list", "--data", "/d", "--reason", "bored"}, exitUsage, `invalid value "bored" for --reason: must be one of max_attempts, rejected, timeout, poison`},
		{[]string{"dlq", "list", "--data", "/d", "--from-offset", "9", "--to-offset", "3"}, exitUsage, "--from-offset 9 is after --to-offset 3"},
		{[]string{"dlq", "purge", "--data", "/d"}, exitUsage, "purge deletes dead letters for good: add --yes (or --dry-run to see what it would delete)"},
		{[]string{"dlq", "purge", "--data", "/d", "--yes", "--before", "5"}, exitUsage, "--before is for a Kafka topic"},
		{[]string{"dlq", "purge", "--topic", "t", "--brokers", "h:1", "--yes", "--before", "5"}, exitUsage, "--before 5 needs --partition: offsets are per partition"},
		{[]string{"dlq", "purge", "--topic", "t", "--brokers", "h:1", "--yes", "--reason", "poison"}, exitUsage, "--reason cannot select records of a Kafka topic"},
		{[]string{"dlq", "replay", "--data", "/d"}, exitUsage, "replay needs --brokers: the cluster to publish to"},
		{[]string{"dlq", "list", "--data", missing}, exitError, "deadletter: no dead-letter store at " + storeDir(missing) + ": no such file or directory"},
		{[]string{"dlq", "purge", "--yes", "--data", missing}, exitError, "deadletter: no dead-letter store at " + storeDir(missing)},
		{[]string{"dlq", "list", "--brokers", "127.0.0.1:1", "--topic", "t"}, exitError, "connect to --brokers 127.0.0.1:1: "},
	}
	for _, tt := range tests {
		r := runBin(t, nil, tt.args...)
		lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		ok := r.code == tt.code && r.stdout == "" && strings.HasPrefix(lines[0], "orderly: ") && strings.Contains(lines[0], tt.want)
		if tt.code == exitUsage {
			ok = ok && len(lines) == 2 && strings.HasPrefix(lines[1], "see 'orderly dlq")
		} else {
			ok = ok && len(lines) == 1
		}
		if !ok {
			t.Errorf("orderly %q: exit %d, stdout %q, stderr:\n%s\nwant exit %d and %q", tt.args, r.code, r.stdout, r.stderr, tt.code, tt.want)
		}
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("purge of a missing store created %s: %v", missing, err)
	}
}

// TestDlqHelp: each dlq command's help follows the convention, and says
// how far a topic is read before it is refused as README does, with both
// of topicCheck's bounds: maxStrayCheck records and maxStrayBytes.
func TestDlqHelp(t *testing.T) {
	sample := fmt.Sprintf("first %d,%03d records, or first %d MiB of them", maxStrayCheck/1000, maxStrayCheck%1000, maxStrayBytes>>20)
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	oneLine := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	if !strings.Contains(oneLine(string(readme)), sample) {
		t.Errorf("README does not say %q", sample)
	}
	for _, cmd := range []string{"", "list", "show", "replay", "purge"} {
		args := []string{"dlq", "--help"}
		if cmd != "" {
			args = []string{"dlq", cmd, "--help"}
		}
		out, err := runCmd(context.Background(), args...)
		if !strings.Contains(oneLine(out), sample) {
			t.Errorf("orderly %s: got no %q in\n%s", strings.Join(args, " "), sample, out)
		}
		if cmd == "" {
			continue
		}
		if err != nil || !strings.HasPrefix(out, "Usage: orderly dlq "+cmd+" [flags]") || !endsWithFooter(out, helpExitStatus) ||
			!strings.Contains(out, "--data string") || !strings.Contains(out, "--since time") {
			t.Errorf("orderly dlq %s --help: %v\n%s", cmd, err, out)
		}
	}
	if out, _ := runCmd(context.Background(), "--help"); !strings.Contains(out, "\n  dlq ") {
		t.Errorf("orderly --help lists no dlq command:\n%s", out)
	}
}

// TestDlqPurgeKeepsDamage: a purge with filters rewrites the local store,
// which cannot keep a damaged stretch: it is refused, naming the store and
// --drop-damaged, and removes nothing; the dry run says what it would
// drop; with --drop-damaged the purge goes ahead and says what it dropped.
func TestDlqPurgeKeepsDamage(t *testing.T) {
	f := newDlqFixture(t)
	path, b := damageFirst(t, f.data)
	sel := []string{"--reason", "rejected"}
	out := dlqRun(t, slices.Concat([]string{"purge", "--dry-run"}, sel, f.local())...)
	if want := "would remove 1 of 4 dead letters and 0 of 1 other record from " + storeDir(f.data) + ", and drop 1 damaged stretch (the warning above)\n"; out != want {
		t.Errorf("purge --dry-run with damage: got %q, want %q", out, want)
	}
	r := runBin(t, nil, slices.Concat([]string{"dlq", "purge", "--yes"}, sel, f.local())...)
	if last := strings.TrimSpace(r.stderr[strings.LastIndex(strings.TrimSpace(r.stderr), "\n")+1:]); r.code != exitError ||
		!strings.Contains(last, storeDir(f.data)+" has 1 damaged stretch (the warning above)") || !strings.Contains(last, "--drop-damaged") {
		t.Errorf("purge with damage: exit %d, stderr %q; want exit 1, a last line naming the store and --drop-damaged", r.code, r.stderr)
	}
	if n := strings.Count(r.stderr, "orderly: warning:"); n != 1 {
		t.Errorf("purge with one damaged stretch: %d warnings, want 1:\n%s", n, r.stderr)
	}
	if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, b) {
		t.Errorf("a refused purge changed the store (%v)", err)
	}
	out = dlqRun(t, slices.Concat([]string{"purge", "--yes", "--drop-damaged"}, sel, f.local())...)
	if want := "removed 1 dead letter and 0 other records from " + storeDir(f.data) + ", 4 left; dropped 1 damaged stretch (the warning above)\n"; out != want {
		t.Errorf("purge --drop-damaged: got %q, want %q", out, want)
	}
}

// damageFirst flips a body byte of the first record of the local store
// under data; it returns the store's file and what it now holds.
func damageFirst(t *testing.T, data string) (path string, b []byte) {
	t.Helper()
	path = filepath.Join(storeDir(data), deadletter.DataFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[16+12+3] ^= 0x40 // a body byte of the first record (after the 16-byte file header)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, b
}

// TestDlqPurgeAllDropsDamage: a purge without filters removes every
// record of the local store, dead letters and other records, as its help
// says, and its damaged stretch: the dry run and the purge say they drop
// it, as a purge with filters does, and the store is empty after. The
// purge said nothing of the stretch.
func TestDlqPurgeAllDropsDamage(t *testing.T) {
	f := newDlqFixture(t)
	path, _ := damageFirst(t, f.data)
	dir := storeDir(f.data)
	out := dlqRun(t, slices.Concat([]string{"purge", "--dry-run"}, f.local())...)
	if want := "would remove 4 of 4 dead letters and 1 of 1 other record from " + dir + ", and drop 1 damaged stretch (the warning above)\n"; out != want {
		t.Errorf("purge --dry-run: got %q, want %q", out, want)
	}
	out = dlqRun(t, slices.Concat([]string{"purge", "--yes"}, f.local())...)
	if want := "removed 4 dead letters and 1 other record from " + dir + ", 0 left; dropped 1 damaged stretch (the warning above)\n"; out != want {
		t.Errorf("purge --yes: got %q, want %q", out, want)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 16 {
		t.Errorf("after the purge, the store file: got %v (%v), want the 16-byte header alone", fi, err)
	}
	help, err := runCmd(context.Background(), "dlq", "purge", "--help")
	if want := "purge removes every record, the dead letters and any other records,"; err != nil || !strings.Contains(strings.Join(strings.Fields(help), " "), want) {
		t.Errorf("dlq purge --help: got %v\n%s\nwant it to say %q", err, help, want)
	}
}

// TestDlqWarnsOfMended: a local store record whose length field alone is
// damaged is listed, with a warning naming the store's file; a purge
// writes the right length back, and the warning is gone.
func TestDlqWarnsOfMended(t *testing.T) {
	f := newDlqFixture(t)
	path := filepath.Join(storeDir(f.data), deadletter.DataFile)
	s, err := deadletter.Open(storeDir(f.data), deadletter.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	if err := s.Scan(func(pos int64, _ deadletter.Record) error { last = pos; return nil }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint32(b[last+4:], 1<<20)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := runBin(t, nil, slices.Concat([]string{"dlq", "list", "--json"}, f.local())...)
	if n := len(jsonLines[entryJSON](t, r.stdout)); r.code != 0 || n != len(f.cases) ||
		!strings.Contains(r.stderr, path+": 1 dead letter has a damaged length field, read by its checksum") {
		t.Errorf("list: exit %d, %d dead letters, stderr %q; want %d listed and a warning naming %s", r.code, n, r.stderr, len(f.cases), path)
	}
	dlqRun(t, slices.Concat([]string{"purge", "--yes", "--reason", "rejected"}, f.local())...)
	r = runBin(t, nil, slices.Concat([]string{"dlq", "list"}, f.local())...)
	if r.code != 0 || strings.Contains(r.stderr, "damaged length") {
		t.Errorf("list after a purge: exit %d, stderr %q; want the length written back, no warning", r.code, r.stderr)
	}
}
