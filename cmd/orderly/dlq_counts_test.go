package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/internal/deadletter"
)

// countSource is a local store and a one-partition topic of f's broker,
// both named name, holding the first dead of f's dead letters, then
// strays copies of its stray record.
func countSource(t *testing.T, f *dlqFixture, name string, dead, strays int) (local, kafka []string) {
	t.Helper()
	var recs []deadletter.Record
	for _, c := range f.cases[:dead] {
		recs = append(recs, c.dead())
	}
	for range strays {
		recs = append(recs, f.cases[5].dead())
	}
	data := filepath.Join(t.TempDir(), name)
	store, err := deadletter.Open(storeDir(data), deadletter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := f.b.CreateTopic(name, 1); err != nil {
		t.Fatal(err)
	}
	var msgs []*sarama.ProducerMessage
	for _, r := range recs {
		if err := store.Append(r); err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, producerMessage(name, 0, r))
	}
	if len(msgs) > 0 {
		produceRecords(t, f.b, msgs...)
	}
	return []string{"--data", data}, []string{"--brokers", f.addr, "--topic", name}
}

// lastLine is the last line of out.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	return lines[len(lines)-1]
}

// TestDlqCountWords: the counts list, show, replay and purge print take
// the singular for 1 and the plural for 0 and 2 (the noun agrees with
// the total it follows): "1 of 1 dead letter", not "1 of 1 dead letters".
func TestDlqCountWords(t *testing.T) {
	f := newDlqFixture(t)
	tests := []struct {
		dead, strays int
		counts       string // list's and show's count, before " in "
		purgeLocal   string // purge --dry-run of the store, before " from "
		purgeKafka   string // purge --dry-run of the topic, after "<topic>/0: "
		removed      string // purge --yes of the store, before " from "
	}{
		{0, 0, "0 of 0 dead letters", "would remove 0 of 0 dead letters", "nothing to delete (log starts at 0)", "removed 0 dead letters"},
		{1, 0, "1 of 1 dead letter", "would remove 1 of 1 dead letter", "would delete 1 record (offsets 0 to 0)", "removed 1 dead letter"},
		{2, 0, "2 of 2 dead letters", "would remove 2 of 2 dead letters", "would delete 2 records (offsets 0 to 1)", "removed 2 dead letters"},
		{1, 1, "1 of 1 dead letter and 1 of 1 other record", "would remove 1 of 1 dead letter and 1 of 1 other record",
			"would delete 2 records (offsets 0 to 1)", "removed 1 dead letter and 1 other record"},
		{2, 2, "2 of 2 dead letters and 2 of 2 other records", "would remove 2 of 2 dead letters and 2 of 2 other records",
			"would delete 4 records (offsets 0 to 3)", "removed 2 dead letters and 2 other records"},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("n%d-s%d", tt.dead, tt.strays)
		t.Run(name, func(t *testing.T) {
			local, kafka := countSource(t, f, name, tt.dead, tt.strays)
			for _, src := range []struct {
				what string
				args []string
			}{{storeDir(local[1]), local}, {"topic " + name, kafka}} {
				type want struct {
					args []string
					line string // the start of the last line of stdout
				}
				wants := []want{
					{[]string{"list"}, tt.counts + " in " + src.what},
					{[]string{"show"}, tt.counts + " in " + src.what},
					{[]string{"replay", "--dry-run", "--to", "orders-retry"}, "would replay " + countsSelected(tt.counts) + " from " + src.what},
				}
				if src.args[0] == "--brokers" {
					wants = append(wants, want{[]string{"purge", "--dry-run"}, name + "/0: " + tt.purgeKafka})
				} else {
					wants = append(wants, want{[]string{"purge", "--dry-run"}, tt.purgeLocal + " from " + src.what},
						want{[]string{"purge", "--yes"}, tt.removed + " from " + src.what + ", 0 left"})
				}
				for _, w := range wants {
					args := slices.Concat(w.args, src.args)
					if got := lastLine(dlqRun(t, args...)); !strings.HasPrefix(got, w.line) {
						t.Errorf("orderly dlq %q: got last line %q, want one starting %q", args, got, w.line)
					}
				}
			}
		})
	}
}

// countsSelected is counts with "selected " before each noun, as
// replay prints it: "1 of 1 selected dead letter".
func countsSelected(counts string) string {
	for _, noun := range []string{"dead letter", "other record"} {
		counts = strings.ReplaceAll(counts, " "+noun, " selected "+noun)
	}
	return counts
}

// TestDlqShowByteCounts: show gives the length of a key, a value and a
// header value not UTF-8 with the noun agreeing: "(1 byte)", "(2 bytes)".
func TestDlqShowByteCounts(t *testing.T) {
	data := t.TempDir()
	store, err := deadletter.Open(storeDir(data), deadletter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := dlqCases(time.Now())[0]
	c.rec = deadletter.Record{Key: []byte("k"), Value: []byte{0xff}, Timestamp: c.rec.Timestamp,
		Headers: []deadletter.Header{{Key: []byte("trace"), Value: []byte{0xfe, 0xfd}}}}
	err = store.Append(c.dead())
	store.Close()
	if err != nil {
		t.Fatal(err)
	}
	out := dlqRun(t, "show", "--data", data)
	for _, want := range []string{
		"  key:            k (1 byte)\n",
		"  value:          base64:/w== (1 byte, not UTF-8)\n",
		"    trace: base64:/v0= (2 bytes, not UTF-8)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show: got\n%s\nwant a line %q", out, want)
		}
	}
}

// TestReplayErrorCounts: a failed replay's error says how many records
// the batches before the failed one sent, the verb agreeing with the
// count.
func TestReplayErrorCounts(t *testing.T) {
	picked := []*entry{{info: deadletter.Info{Topic: "orders", Partition: 1, Offset: 20}}}
	msgs := []*sarama.ProducerMessage{{Topic: "orders-retry", Partition: 2}}
	failed := sarama.ProducerErrors{{Msg: msgs[0], Err: sarama.ErrMessageSizeTooLarge}}
	for _, tt := range []struct {
		err   error
		start int
		want  string
	}{
		{failed, 0, "replay orders/1 offset 20 to orders-retry/2 (1 of this batch failed; 0 records before this batch were sent): "},
		{failed, 1, "replay orders/1 offset 20 to orders-retry/2 (1 of this batch failed; 1 record before this batch was sent): "},
		{failed, 2, "replay orders/1 offset 20 to orders-retry/2 (1 of this batch failed; 2 records before this batch were sent): "},
		{sarama.ErrOutOfBrokers, 1, "replay (1 record before this batch was sent): "},
		{sarama.ErrOutOfBrokers, 500, "replay (500 records before this batch were sent): "},
	} {
		if got := replayError(tt.err, picked, msgs, tt.start).Error(); !strings.HasPrefix(got, tt.want) {
			t.Errorf("replayError(%v, start %d): got %q, want it to start %q", tt.err, tt.start, got, tt.want)
		}
	}
}
