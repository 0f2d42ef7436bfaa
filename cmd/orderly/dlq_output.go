package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/orderly-go/orderly/internal/deadletter"
)

// errorWidth is how much of the error a list line shows; on a terminal
// the whole line is also cut to the terminal's width.
const errorWidth = 60

// runList is `orderly dlq list`.
func runList(ctx context.Context, o *dlqOpts, e env) error {
	if err := o.prepare(); err != nil {
		return err
	}
	enc := json.NewEncoder(e.stdout)
	rows := [][]string{{"TOPIC", "PARTITION", "OFFSET", "REASON", "ATTEMPTS", "DEAD-LETTERED", "SIZE", "ERROR"}}
	var n tally
	source, err := readEntries(ctx, o, nil, e.stderr, func(en *entry) error {
		matched := o.filter.match(en)
		n.add(en, matched)
		switch {
		case !matched:
		case o.json:
			return enc.Encode(summaryJSON(en))
		default:
			rows = append(rows, listRow(en))
		}
		return nil
	})
	if err != nil || o.json {
		return err
	}
	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
	width, term := terminal(e.stdout)
	for line := range strings.Lines(table.String()) {
		line = strings.TrimRight(line, " \n")
		if term && width > 0 {
			line = cutRunes(line, width) // the error column gives way
		}
		fmt.Fprintln(e.stdout, line)
	}
	fmt.Fprintf(e.stdout, "%s in %s\n", n.counts(""), source)
	return nil
}

// tally counts the records a command read, dead letters and other
// records (a stray, which the commands show as not a dead letter) apart:
// how many it read, and how many of them it selected.
type tally struct {
	dead, deadSelected   int
	other, otherSelected int
}

func (t *tally) add(en *entry, selected bool) {
	sel := 0
	if selected {
		sel = 1
	}
	if en.infoErr != nil {
		t.other, t.otherSelected = t.other+1, t.otherSelected+sel
	} else {
		t.dead, t.deadSelected = t.dead+1, t.deadSelected+sel
	}
}

// selected is how many records were selected, dead letters or not.
func (t tally) selected() int { return t.deadSelected + t.otherSelected }

// counts is "2 of 6 <what>dead letters", and when there were other
// records "2 of 5 <what>dead letters and 1 of 1 <what>other record": the
// noun agrees with the count it follows, the total.
func (t tally) counts(what string) string {
	s := fmt.Sprintf("%d of %s", t.deadSelected, plural(t.dead, what+"dead letter"))
	if t.other > 0 {
		s += fmt.Sprintf(" and %d of %s", t.otherSelected, plural(t.other, what+"other record"))
	}
	return s
}

// selectedCounts is "2 dead letters", and when there were other records
// "2 dead letters and 1 other record": the selected ones alone.
func (t tally) selectedCounts() string {
	s := plural(t.deadSelected, "dead letter")
	if t.other > 0 {
		s += " and " + plural(t.otherSelected, "other record")
	}
	return s
}

// listRow is an entry's line in the list table.
func listRow(en *entry) []string {
	size := formatSize(len(en.rec.Key) + len(en.rec.Value))
	if en.infoErr != nil {
		return []string{"-", "-", "-", "-", "-", "-", size, "not a dead letter: " + oneLine(en.infoErr.Error(), errorWidth)}
	}
	i := en.info
	return []string{i.Topic, strconv.Itoa(int(i.Partition)), strconv.FormatInt(i.Offset, 10), i.Reason,
		strconv.Itoa(i.Attempts), deadletter.FormatTime(i.Timestamp), size, oneLine(i.Message, errorWidth)}
}

// oneLine is s on one line, cut to n runes with … if longer.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	return cutRunes(s, n)
}

func cutRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:max(n-1, 0)]) + "…"
}

func formatSize(n int) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/1024)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// entryJSON is a list line with --json; show adds the content.
type entryJSON struct {
	Topic          string `json:"topic"`
	Partition      int32  `json:"partition"`
	Offset         int64  `json:"offset"`
	Reason         string `json:"reason"`
	Attempts       int    `json:"attempts"`
	DeadLetteredAt string `json:"dead_lettered_at"`
	FirstFailureAt string `json:"first_failure_at"`
	Group          string `json:"group"`
	Error          string `json:"error"`
	Size           int    `json:"size"` // key and value bytes
	// NotDeadLetter says why the headers did not parse; the fields above
	// are then empty.
	NotDeadLetter string `json:"not_dead_letter,omitempty"`
	// Where the record is: a local store's byte position, or the
	// dead-letter topic's partition and offset.
	StorePosition *int64 `json:"store_position,omitempty"`
	DLQPartition  *int32 `json:"dlq_partition,omitempty"`
	DLQOffset     *int64 `json:"dlq_offset,omitempty"`
}

func summaryJSON(en *entry) entryJSON {
	j := entryJSON{Size: len(en.rec.Key) + len(en.rec.Value)}
	if en.local {
		j.StorePosition = &en.pos
	} else {
		j.DLQPartition, j.DLQOffset = &en.partition, &en.offset
	}
	if en.infoErr != nil {
		j.NotDeadLetter = en.infoErr.Error()
		return j
	}
	i := en.info
	j.Topic, j.Partition, j.Offset, j.Reason, j.Attempts = i.Topic, i.Partition, i.Offset, i.Reason, i.Attempts
	j.DeadLetteredAt, j.FirstFailureAt = deadletter.FormatTime(i.Timestamp), deadletter.FormatTime(i.FirstFailure)
	j.Group, j.Error = i.Group, i.Message
	return j
}

// showJSON is a show line with --json. Key and Value are null for a
// Kafka null (a null key, a tombstone), else text when they are UTF-8,
// else base64 with KeyBase64 or ValueBase64 set.
type showJSON struct {
	entryJSON
	Timestamp   string       `json:"timestamp"` // the original record's
	Key         *string      `json:"key"`
	KeyBase64   bool         `json:"key_base64"`
	Value       *string      `json:"value"`
	ValueBase64 bool         `json:"value_base64"`
	Headers     []headerJSON `json:"headers"`
}

type headerJSON struct {
	Key         string  `json:"key"`
	Value       *string `json:"value"`
	ValueBase64 bool    `json:"value_base64,omitempty"`
}

// text is b as a JSON value: nil for nil, the text when b is UTF-8, else
// base64 and true.
func text(b []byte) (*string, bool) {
	if b == nil {
		return nil, false
	}
	if utf8.Valid(b) {
		s := string(b)
		return &s, false
	}
	s := base64.StdEncoding.EncodeToString(b)
	return &s, true
}

func fullJSON(en *entry) showJSON {
	j := showJSON{entryJSON: summaryJSON(en), Timestamp: deadletter.FormatTime(en.rec.Timestamp), Headers: []headerJSON{}}
	j.Key, j.KeyBase64 = text(en.rec.Key)
	j.Value, j.ValueBase64 = text(en.rec.Value)
	for _, h := range en.rec.Headers {
		hj := headerJSON{Key: string(h.Key)}
		hj.Value, hj.ValueBase64 = text(h.Value)
		j.Headers = append(j.Headers, hj)
	}
	return j
}

// runShow is `orderly dlq show`.
func runShow(ctx context.Context, o *dlqOpts, e env) error {
	if err := o.prepare(); err != nil {
		return err
	}
	enc := json.NewEncoder(e.stdout)
	var n tally
	source, err := readEntries(ctx, o, nil, e.stderr, func(en *entry) error {
		matched := o.filter.match(en)
		n.add(en, matched)
		if !matched {
			return nil
		}
		selected := n.selected()
		if o.json {
			return enc.Encode(fullJSON(en))
		}
		if selected > 1 {
			fmt.Fprintln(e.stdout)
		}
		showText(e.stdout, en)
		return nil
	})
	if err != nil {
		return err
	}
	if !o.json {
		if n.selected() > 0 {
			fmt.Fprintln(e.stdout)
		}
		fmt.Fprintf(e.stdout, "%s in %s\n", n.counts(""), source)
	}
	return nil
}

// showText writes an entry in full, one field a line.
func showText(w io.Writer, en *entry) {
	i := en.info
	if en.infoErr != nil {
		fmt.Fprintf(w, "record at %s: not a dead letter: %v\n", en.where(), en.infoErr)
	} else {
		fmt.Fprintf(w, "dead letter of %s/%d offset %d (%s)\n", i.Topic, i.Partition, i.Offset, en.where())
		field(w, "reason", i.Reason)
		field(w, "attempts", strconv.Itoa(i.Attempts))
		field(w, "error", i.Message)
		field(w, "dead-lettered", deadletter.FormatTime(i.Timestamp))
		field(w, "first failure", deadletter.FormatTime(i.FirstFailure))
		field(w, "group", i.Group)
	}
	field(w, "timestamp", deadletter.FormatTime(en.rec.Timestamp))
	field(w, "key", bytesText(en.rec.Key))
	field(w, "value", bytesText(en.rec.Value))
	field(w, "headers", strconv.Itoa(len(en.rec.Headers)))
	for _, h := range en.rec.Headers {
		v := bytesText(h.Value)
		if h.Value != nil && utf8.Valid(h.Value) {
			v = string(h.Value) // headers are short text: no length
		}
		fmt.Fprintf(w, "    %s: %s\n", h.Key, v)
	}
}

func field(w io.Writer, name, v string) {
	// Continuation lines of a multi-line value are indented under it.
	v = strings.ReplaceAll(v, "\n", "\n"+strings.Repeat(" ", 18))
	fmt.Fprintf(w, "  %-15s %s\n", name+":", v)
}

// bytesText shows b: (null), (empty), its text when UTF-8, else base64
// saying so; with its length.
func bytesText(b []byte) string {
	switch {
	case b == nil:
		return "(null)"
	case len(b) == 0:
		return "(empty)"
	case utf8.Valid(b):
		return fmt.Sprintf("%s (%s)", b, plural(len(b), "byte"))
	}
	return fmt.Sprintf("base64:%s (%s, not UTF-8)", base64.StdEncoding.EncodeToString(b), plural(len(b), "byte"))
}
