package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/orderly-go/orderly/internal/deadletter"
)

// TestDlqOrdinaryTopic: a topic of ordinary records (no dead-letter
// headers, or not all of them), named by mistake as the dead-letter topic,
// is refused by every dlq command, before it lists, shows, replays or
// deletes anything: one line naming the topic (and its variable), the
// first record's partition and offset and what its headers lack, exit 1.
// list printed those records as dead letters ("3 of 3 dead letters"),
// replay --to copied them and purge deleted them.
func TestDlqOrdinaryTopic(t *testing.T) {
	f := newDlqFixture(t)
	// lone: three partitions, one record in partition 2.
	for topic, n := range map[string]int32{"payments": 1, "lone": 3} {
		if err := f.b.CreateTopic(topic, n); err != nil {
			t.Fatal(err)
		}
	}
	p, err := sarama.NewSyncProducer([]string{f.addr}, dlqSarama())
	if err != nil {
		t.Fatal(err)
	}
	// orders/0 offset 0 has every dead-letter header but the group's (a
	// record copied by hand from a dead letter, say); the others, and
	// every record of payments, have none.
	info := f.cases[0].info
	partial := slices.DeleteFunc(deadletter.Headers(nil, info), func(h deadletter.Header) bool { return string(h.Key) == deadletter.HeaderGroup })
	at := f.now.Truncate(time.Millisecond)
	for _, m := range []struct {
		topic   string
		part    int32
		headers []deadletter.Header
	}{
		{"orders", 0, partial},
		{"orders", 0, nil},
		{"orders", 2, []deadletter.Header{{Key: []byte("trace"), Value: []byte("t1")}}},
		{"payments", 0, nil},
		{"payments", 0, nil},
		{"lone", 2, nil},
	} {
		r := deadletter.Record{Key: []byte("acct-9"), Value: []byte(`{"amount":1}`), Headers: m.headers, Timestamp: at}
		if err := p.SendMessages([]*sarama.ProducerMessage{producerMessage(m.topic, m.part, r)}); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	hw, retry := f.b.HighWatermarks("orders"), f.b.HighWatermarks("orders-retry")

	const (
		orders = "--topic orders is not a dead-letter topic: none of its 3 records has the __orderly.errors.* headers of a dead letter " +
			"(the first, partition 0 offset 0: deadletter: missing header __orderly.errors.group: not an Orderly dead letter)"
		payments = "--topic payments is not a dead-letter topic: none of its 2 records has the __orderly.errors.* headers of a dead letter " +
			"(the first, partition 0 offset 0: deadletter: no __orderly.errors.* headers: not an Orderly dead letter)"
		fromEnv = "--topic orders (from ORDERLY_TOPIC) is not a dead-letter topic: none of its 3 records"
		// purge --partition 2 reads orders/2, then, as it holds no dead
		// letter, the other partitions.
		orders2 = "--topic orders is not a dead-letter topic: none of its 1 record in partition 2, and none of its 2 records in its other partitions, " +
			"has the __orderly.errors.* headers of a dead letter (the first, partition 2 offset 0: deadletter: no __orderly.errors.* headers: not an Orderly dead letter)"
		// lone's other partitions hold no record.
		lone2 = "--topic lone is not a dead-letter topic: none of its 1 record in partition 2 has the __orderly.errors.* headers of a dead letter " +
			"(the first, partition 2 offset 0: deadletter: no __orderly.errors.* headers: not an Orderly dead letter); its other partitions hold no record"
		// payments has no other partition.
		payments0 = "--topic payments is not a dead-letter topic: none of its 2 records in partition 0 has the __orderly.errors.* headers of a dead letter " +
			"(the first, partition 0 offset 0: deadletter: no __orderly.errors.* headers: not an Orderly dead letter)"
	)
	src := []string{"--brokers", f.addr, "--topic", "orders"}
	tests := []struct {
		name string
		vars []string
		args []string
		want string // the start of the one line after "orderly: "
	}{
		{"list", nil, slices.Concat([]string{"dlq", "list"}, src), orders},
		{"list --json", nil, slices.Concat([]string{"dlq", "list", "--json"}, src), orders},
		{"list with a filter", nil, slices.Concat([]string{"dlq", "list", "--reason", "poison"}, src), orders},
		{"list, no headers at all", nil, []string{"dlq", "list", "--brokers", f.addr, "--topic", "payments"}, payments},
		{"list, topic from env", []string{"ORDERLY_TOPIC=orders"}, []string{"dlq", "list", "--brokers", f.addr}, fromEnv},
		{"show", nil, slices.Concat([]string{"dlq", "show"}, src), orders},
		{"show --json", nil, slices.Concat([]string{"dlq", "show", "--json"}, src), orders},
		{"replay", nil, slices.Concat([]string{"dlq", "replay"}, src), orders},
		{"replay --to", nil, slices.Concat([]string{"dlq", "replay", "--to", "orders-retry"}, src), orders},
		{"replay --to --dry-run", nil, slices.Concat([]string{"dlq", "replay", "--to", "orders-retry", "--dry-run"}, src), orders},
		{"purge", nil, slices.Concat([]string{"dlq", "purge", "--yes"}, src), orders},
		{"purge a partition", nil, slices.Concat([]string{"dlq", "purge", "--yes", "--partition", "2"}, src), orders2},
		{"purge a partition, the others empty", nil, []string{"dlq", "purge", "--yes", "--partition", "2", "--brokers", f.addr, "--topic", "lone"}, lone2},
		{"purge the only partition", nil, []string{"dlq", "purge", "--yes", "--partition", "0", "--brokers", f.addr, "--topic", "payments"}, payments0},
		{"purge --dry-run", nil, slices.Concat([]string{"dlq", "purge", "--dry-run"}, src), orders},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runBin(t, tt.vars, tt.args...)
			if r.code != exitError || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "orderly: "+tt.want) {
				t.Errorf("%s orderly %q: got exit %d, stdout %q, stderr:\n%s\nwant exit 1, no stdout, one line starting:\norderly: %s",
					strings.Join(tt.vars, " "), tt.args, r.code, r.stdout, r.stderr, tt.want)
			}
		})
	}
	if got := f.b.HighWatermarks("orders"); !maps.Equal(got, hw) {
		t.Errorf("orders' high watermarks: got %v, want %v (nothing replayed to it)", got, hw)
	}
	if got := f.b.HighWatermarks("orders-retry"); !maps.Equal(got, retry) {
		t.Errorf("orders-retry's high watermarks: got %v, want %v (nothing replayed to it)", got, retry)
	}
	if got := f.b.LogStartOffsets("orders"); got[0] != 0 || got[2] != 0 {
		t.Errorf("orders' log start offsets: got %v, want 0 (nothing purged)", got)
	}
	if got := f.b.LogStartOffsets("lone"); got[2] != 0 {
		t.Errorf("lone's log start offsets: got %v, want 0 (nothing purged)", got)
	}
	if got := f.b.LogStartOffsets("payments"); got[0] != 0 {
		t.Errorf("payments' log start offsets: got %v, want 0 (nothing purged)", got)
	}
}

// TestDlqReplayStrayWarns: on a dead-letter topic, a stray record (not a
// dead letter) that --to takes along is named on stderr, also by a dry
// run; it went silently.
func TestDlqReplayStrayWarns(t *testing.T) {
	f := newDlqFixture(t)
	for _, dry := range []bool{true, false} {
		args := slices.Concat([]string{"dlq", "replay", "--to", "orders-retry"}, f.kafka())
		if dry {
			args = append(args, "--dry-run")
		}
		r := runBin(t, nil, args...)
		// d5, the stray, is the third record of orders-dlq/1.
		want := "orderly: warning: dead-letter partition 1 offset 2 is not a dead letter (deadletter: no __orderly.errors.* headers: not an Orderly dead letter): " +
			"--to orders-retry gets it as it is: key, value, headers and timestamp\n"
		if r.code != 0 || r.stderr != want || !strings.Contains(r.stdout, "replay 5 of 5 selected dead letters and 1 of 1 selected other record") && !strings.Contains(r.stdout, "replayed 5 of 5 selected dead letters and 1 of 1 selected other record") {
			t.Errorf("orderly %q: got exit %d, stdout %q, stderr:\n%s\nwant exit 0, 5 and 1 replayed, stderr:\n%s", args, r.code, r.stdout, r.stderr, want)
		}
	}
}

// TestDlqOrdinaryTopicSampled: a large ordinary topic is refused after
// the first maxStrayCheck records without a dead letter, not read to its
// end, and the error says how far it read.
func TestDlqOrdinaryTopicSampled(t *testing.T) {
	f := newDlqFixture(t)
	if err := f.b.CreateTopic("big", 1); err != nil {
		t.Fatal(err)
	}
	p, err := sarama.NewSyncProducer([]string{f.addr}, dlqSarama())
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]*sarama.ProducerMessage, maxStrayCheck+500)
	for i := range msgs {
		msgs[i] = producerMessage("big", 0, deadletter.Record{Key: []byte("k"), Value: []byte("v"), Timestamp: f.now})
	}
	if err := p.SendMessages(msgs); err != nil {
		t.Fatal(err)
	}
	p.Close()
	r := runBin(t, nil, "dlq", "list", "--brokers", f.addr, "--topic", "big")
	want := fmt.Sprintf("orderly: --topic big is not a dead-letter topic: none of the first %d of its records has the __orderly.errors.* headers of a dead letter (the first, partition 0 offset 0:", maxStrayCheck)
	if r.code != exitError || !strings.HasPrefix(r.stderr, want) {
		t.Fatalf("dlq list on %d ordinary records: got exit %d, stderr:\n%s\nwant exit 1 and a line starting:\n%s", len(msgs), r.code, r.stderr, want)
	}
}

// TestDlqStraysFirst: on a dead-letter topic whose first records are
// strays, what the check holds back until the first dead letter comes
// out then, in the order it was read: the stray, and the warning of a
// transaction still open read before the dead letter. On a topic it
// refuses, neither comes out.
func TestDlqStraysFirst(t *testing.T) {
	f := newDlqFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := sarama.NewSyncProducer([]string{f.addr}, dlqSarama())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	stray := f.cases[5] // no dead-letter headers
	// Each topic's partition 0: the stray at offset 0, then a dead
	// letter in a transaction left open at 1. Partition 1: dead
	// letters, or another stray.
	write := func(topic string, p1 ...dlqCase) {
		t.Helper()
		if err := f.b.CreateTopic(topic, 2); err != nil {
			t.Fatal(err)
		}
		msgs := []*sarama.ProducerMessage{producerMessage(topic, 0, stray.dead())}
		for _, c := range p1 {
			msgs = append(msgs, producerMessage(topic, 1, c.dead()))
		}
		if err := p.SendMessages(msgs); err != nil {
			t.Fatal(err)
		}
		newTxProducer(ctx, t, f.addr, topic, topic+"-tx", kgo.RecordPartitioner(kgo.ManualPartitioner())).begin(f.cases[2])
	}
	write("strays-first", f.cases[0], f.cases[1])
	write("strays-only", stray)

	out, stderr, err := runCmd2(ctx, "dlq", "list", "--json", "--brokers", f.addr, "--topic", "strays-first")
	if err != nil {
		t.Fatalf("dlq list --json of strays-first: %v\nstderr:\n%s", err, stderr)
	}
	var got []string
	for _, e := range jsonLines[entryJSON](t, out) {
		got = append(got, fmt.Sprintf("%d/%d %s", *e.DLQPartition, *e.DLQOffset, cmp.Or(e.Reason, "stray")))
	}
	if want := []string{"0/0 stray", "1/0 " + f.cases[0].info.Reason, "1/1 " + f.cases[1].info.Reason}; !slices.Equal(got, want) {
		t.Errorf("dlq list --json of strays-first: got %q, want %q (partition/offset reason)", got, want)
	}
	if want := "orderly: warning: strays-first/0: offsets 1 to 1 not read: a transaction open since offset 1 holds them back (0 committed records among them) until it ends\n"; stderr != want {
		t.Errorf("dlq list --json of strays-first: got stderr:\n%s\nwant:\n%s", stderr, want)
	}

	out, stderr, err = runCmd2(ctx, "dlq", "list", "--json", "--brokers", f.addr, "--topic", "strays-only")
	want := "--topic strays-only is not a dead-letter topic: none of its 2 records has the __orderly.errors.* headers of a dead letter (the first, partition 0 offset 0:"
	if err == nil || !strings.HasPrefix(err.Error(), want) || out != "" || stderr != "" {
		t.Errorf("dlq list --json of strays-only: got error %v, stdout %q, stderr %q; want an error starting %q and no output", err, out, stderr, want)
	}
}

// TestDlqOrdinaryTopicBytes: on an ordinary topic of large records the
// check stops at maxStrayBytes, before maxStrayCheck records, and refuses
// the topic there: list, which holds the records back, and purge, which
// does not.
func TestDlqOrdinaryTopicBytes(t *testing.T) {
	f := newDlqFixture(t)
	if err := f.b.CreateTopic("wide", 1); err != nil {
		t.Fatal(err)
	}
	p, err := sarama.NewSyncProducer([]string{f.addr}, dlqSarama())
	if err != nil {
		t.Fatal(err)
	}
	const size = 64 << 10
	value := make([]byte, size-1) // with the 1-byte key, size bytes a record
	msgs := make([]*sarama.ProducerMessage, maxStrayBytes/size+100)
	total := len(msgs)
	for i := range msgs {
		msgs[i] = producerMessage("wide", 0, deadletter.Record{Key: []byte("k"), Value: value, Timestamp: f.now})
	}
	for len(msgs) > 0 { // in sends under the producer's request limit
		n := min(len(msgs), 64)
		if err := p.SendMessages(msgs[:n]); err != nil {
			t.Fatal(err)
		}
		msgs = msgs[n:]
	}
	p.Close()
	want := fmt.Sprintf("orderly: --topic wide is not a dead-letter topic: none of the first %d of its records has", maxStrayBytes/size)
	for _, args := range [][]string{{"list"}, {"purge", "--yes"}} {
		r := runBin(t, nil, slices.Concat([]string{"dlq"}, args, []string{"--brokers", f.addr, "--topic", "wide"})...)
		if r.code != exitError || !strings.HasPrefix(r.stderr, want) {
			t.Fatalf("dlq %s on %d ordinary records of %d bytes: got exit %d, stderr:\n%s\nwant exit 1 and a line starting:\n%s", args[0], total, size, r.code, r.stderr, want)
		}
	}
	if start, hw := f.b.LogStartOffsets("wide")[0], f.b.HighWatermarks("wide")[0]; start != 0 || hw != int64(total) {
		t.Fatalf("after the refused purge: got log start %d, high watermark %d; want 0 and %d", start, hw, total)
	}
}

// mixTopic writes to topic mix of f's broker (one partition) a plain
// record (offset 0), a record whose one dead-letter header names origin
// topic in (offset 1), and a dead letter of in/0 offset 7 (offset 2); it
// creates in and plain (one partition each) to replay to, and returns the
// three records as written.
func mixTopic(t *testing.T, f *dlqFixture) []deadletter.Record {
	t.Helper()
	for _, topic := range []string{"mix", "in", "plain"} {
		if err := f.b.CreateTopic(topic, 1); err != nil {
			t.Fatal(err)
		}
	}
	at := f.now.Add(-time.Hour).Truncate(time.Millisecond).UTC()
	info := deadletter.Info{Topic: "in", Partition: 0, Offset: 7, Timestamp: f.now.Truncate(time.Millisecond).UTC(), Group: "g",
		Attempts: 3, Reason: deadletter.ReasonMaxAttempts, Message: "boom", FirstFailure: at}
	recs := []deadletter.Record{
		{Key: []byte("k0"), Value: []byte("plain"), Headers: []deadletter.Header{{Key: []byte("trace"), Value: []byte("r0")}}, Timestamp: at},
		{Key: []byte("k1"), Value: []byte("partial"), Timestamp: at.Add(time.Millisecond), Headers: []deadletter.Header{
			{Key: []byte("trace"), Value: []byte("r1")}, {Key: []byte(deadletter.HeaderTopic), Value: []byte("in")}}},
		{Key: []byte("k2"), Value: []byte("dead"), Timestamp: at.Add(2 * time.Millisecond),
			Headers: deadletter.Headers([]deadletter.Header{{Key: []byte("trace"), Value: []byte("r2")}}, info)},
	}
	msgs := make([]*sarama.ProducerMessage, len(recs))
	for i, r := range recs {
		msgs[i] = producerMessage("mix", 0, r)
	}
	produceRecords(t, f.b, msgs...)
	return recs
}

// TestDlqStraysCounted: list and show count a topic's dead letters and
// its other records apart: mix holds one dead letter and two other
// records.
func TestDlqStraysCounted(t *testing.T) {
	f := newDlqFixture(t)
	mixTopic(t, f)
	src := []string{"--brokers", f.addr, "--topic", "mix"}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"list"}, "1 of 1 dead letter and 2 of 2 other records in topic mix\n"},
		{[]string{"show"}, "1 of 1 dead letter and 2 of 2 other records in topic mix\n"},
		{[]string{"list", "--origin-topic", "in"}, "1 of 1 dead letter and 0 of 2 other records in topic mix\n"},
		{[]string{"show", "--reason", "poison"}, "0 of 1 dead letter and 0 of 2 other records in topic mix\n"},
	} {
		args := slices.Concat([]string{"dlq"}, tt.args, src)
		r := runBin(t, nil, args...)
		if r.code != 0 || !strings.HasSuffix(r.stdout, tt.want) {
			t.Errorf("orderly %q: got exit %d, stdout:\n%s\nstderr: %s\nwant exit 0, stdout ending %q", args, r.code, r.stdout, r.stderr, tt.want)
		}
	}
}

// TestDlqReplayStrays: replay without --to leaves mix's two records that
// are not dead letters, one of them with __orderly.errors.topic, and says
// they are not dead letters. With --to, each arrives as it is: key,
// value, every header (the stray's __orderly.errors.topic too) and
// timestamp. The dead letter goes without the headers its dead-lettering
// added.
func TestDlqReplayStrays(t *testing.T) {
	f := newDlqFixture(t)
	recs := mixTopic(t, f)
	src := []string{"--brokers", f.addr, "--topic", "mix"}

	r := runBin(t, nil, slices.Concat([]string{"dlq", "replay"}, src)...)
	wantErr := "orderly: 2 selected records not replayed: not dead letters (the warnings above say what each lacks), they have no origin to go back to: --to names a topic for them\n"
	if r.code != exitError || !strings.HasSuffix(r.stderr, wantErr) || strings.Count(r.stderr, "orderly: warning: not replayed: dead-letter partition 0 offset ") != 2 ||
		!strings.Contains(r.stdout, "replayed 1 of 1 selected dead letter and 0 of 2 selected other records from topic mix: in/0 1\n") {
		t.Errorf("replay without --to: got exit %d, stdout:\n%s\nstderr:\n%s\nwant exit 1, 1 of 1 and 0 of 2 replayed, two warnings and the error %q", r.code, r.stdout, r.stderr, wantErr)
	}

	r = runBin(t, nil, slices.Concat([]string{"dlq", "replay", "--to", "plain"}, src)...)
	if r.code != 0 || !strings.Contains(r.stdout, "replayed 1 of 1 selected dead letter and 2 of 2 selected other records from topic mix: plain/0 3\n") ||
		strings.Count(r.stderr, "--to plain gets it as it is: key, value, headers and timestamp\n") != 2 {
		t.Fatalf("replay --to plain: got exit %d, stdout:\n%s\nstderr:\n%s\nwant exit 0, 1 and 2 replayed, two warnings", r.code, r.stdout, r.stderr)
	}
	want := []deadletter.Record{recs[0], recs[1], recs[2]}
	want[2].Headers = deadletter.Original(recs[2].Headers)
	// Each record as text: key, value, headers, timestamp.
	texts := func(rs []deadletter.Record) []string {
		var out []string
		for _, r := range rs {
			s := fmt.Sprintf("key %q value %q at %s headers", r.Key, r.Value, deadletter.FormatTime(r.Timestamp))
			for _, h := range r.Headers {
				s += fmt.Sprintf(" %s=%q", h.Key, h.Value)
			}
			out = append(out, s)
		}
		return out
	}
	if got, want := texts(consumed(t, f.addr, "plain", 0, 0)), texts(want); !slices.Equal(got, want) {
		t.Errorf("plain/0 after replay --to plain: got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
