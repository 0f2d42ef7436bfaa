package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
