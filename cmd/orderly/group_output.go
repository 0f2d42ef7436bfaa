package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// maxRangesShown is how many finished ranges of a partition the text
// output lists; --json lists them all.
const maxRangesShown = 8

// writeGroupJSON writes v as one JSON object.
func writeGroupJSON(w io.Writer, v *groupView) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}

// lagLine is the summary under the table: the lag over the partitions
// with a committed offset, and how many have none (their lag is unknown:
// where consumption starts depends on the consumer's reset policy).
func lagLine(v *groupView) string {
	none := 0
	for _, p := range v.Parts {
		if p.Committed == nil {
			none++
		}
	}
	if none > 0 && none == len(v.Parts) {
		return fmt.Sprintf("\nlag unknown: no partition has a committed offset (%s)\n", plural(none, "partition"))
	}
	over := ""
	if none > 0 {
		over = fmt.Sprintf(" over the %s with a committed offset (%d without one, lag unknown)", plural(len(v.Parts)-none, "partition"), none)
	}
	return fmt.Sprintf("\nlag %d%s, of which %d finished above the committed offsets (kafka_exporter, Burrow and KEDA count them as lag; they will not be handled again)\n",
		v.Lag, over, v.FinishedAbove)
}

// writeGroupText writes v as a header line, a table of partitions, and
// the details: finished ranges, waiting messages, members.
func writeGroupText(w io.Writer, v *groupView) error {
	return writeGroupTextAt(w, v, time.Now())
}

func writeGroupTextAt(w io.Writer, v *groupView, now time.Time) error {
	var b strings.Builder
	fmt.Fprintf(&b, "group %s: %s, %s", v.Group, orDash(v.State), plural(len(v.Members), "member"))
	if v.Protocol != "" {
		fmt.Fprintf(&b, " (%s)", v.Protocol)
	}
	b.WriteString("\n\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tCOMMITTED\tHIGH-WATERMARK\tLAG\tFINISHED-ABOVE\tWAITING\tMETADATA\tMEMBER")
	for _, p := range v.Parts {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%d\t%d\t%s\t%s\n", p.Topic, p.Partition, optInt(p.Committed), p.HighWatermark,
			optInt(p.Lag), p.FinishedAbove, len(p.Waiting), orDash(p.Metadata), orDash(p.Member))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteString(lagLine(v))

	var finished, waiting, problems []string
	for _, p := range v.Parts {
		tp := fmt.Sprintf("%s/%d", p.Topic, p.Partition)
		if p.MetadataError != "" {
			problems = append(problems, fmt.Sprintf("  %s: %s metadata: %s", tp, p.Metadata, p.MetadataError))
		}
		if len(p.Finished) > 0 {
			finished = append(finished, fmt.Sprintf("  %s: %d in %s: %s", tp, p.FinishedAbove, plural(len(p.Finished), "range"), ranges(p.Finished)))
		}
		due := dueText(v, &p)
		for _, wt := range p.Waiting {
			when := due
			if wt.NotBefore != nil {
				when = "not before " + wt.NotBefore.String()
				if d := wt.NotBefore.Sub(now); d > 0 {
					when += fmt.Sprintf(" (in %s)", d.Round(time.Second))
				} else {
					when += " (" + due + ")"
				}
			}
			if wt.FirstFailure != nil {
				when += ", first failed " + wt.FirstFailure.String()
			}
			waiting = append(waiting, fmt.Sprintf("  %s offset %d: attempt %d, %s", tp, wt.Offset, wt.Attempt, when))
		}
	}
	section(&b, "commit metadata not used:", problems)
	section(&b, "finished above the committed offset:", finished)
	section(&b, "waiting for a retry:", waiting)
	var members []string
	for _, m := range v.Members {
		var assigned []string
		for _, topic := range slices.Sorted(maps.Keys(m.Assigned)) {
			assigned = append(assigned, topic+" "+joinInt32s(m.Assigned[topic]))
		}
		static := ""
		if m.InstanceID != "" {
			static = "instance " + m.InstanceID + ", "
		}
		members = append(members, fmt.Sprintf("  %s (%sclient %s, host %s): %s", m.ID, static, orDash(m.ClientID), orDash(m.Host), orDash(strings.Join(assigned, "; "))))
	}
	section(&b, "members:", members)
	_, err := io.WriteString(w, b.String())
	return err
}

// dueText is what describe says of a message of p waiting for a retry
// past its not-before. The retry is due, and may be running already (the
// metadata lists a message until it is done) when a member holds p. With
// none, it runs nowhere, unless the group is rebalancing: the broker names
// no partition's member until the group is Stable again, and while an
// eager rebalance has every partition revoked, a cooperative one leaves
// them with their members, which go on running them.
func dueText(v *groupView, p *partitionView) string {
	switch {
	case p.Member != "":
		return "due: its retry may be running"
	case v.State == "PreparingRebalance" || v.State == "CompletingRebalance":
		return "due; the group is rebalancing: under an eager protocol no member holds the partition until it ends, under a cooperative one its retry may be running"
	case slices.ContainsFunc(v.Members, func(m memberView) bool { return m.unread }):
		return "due: its retry may be running (a member's assignment could not be read)"
	}
	return "due; no member holds the partition"
}

func section(b *strings.Builder, title string, lines []string) {
	if len(lines) == 0 {
		return
	}
	b.WriteString("\n" + title + "\n")
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
}

// ranges lists inclusive ranges as "5, 7-9", the first maxRangesShown.
func ranges(rs []offsetRange) string {
	var s []string
	for i, r := range rs {
		if i == maxRangesShown {
			s = append(s, fmt.Sprintf("and %d more (--json lists them)", len(rs)-i))
			break
		}
		if r.From == r.To {
			s = append(s, strconv.FormatInt(r.From, 10))
		} else {
			s = append(s, fmt.Sprintf("%d-%d", r.From, r.To))
		}
	}
	return strings.Join(s, ", ")
}

func joinInt32s(ns []int32) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(int(n))
	}
	return strings.Join(s, ",")
}

func optInt(p *int64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatInt(*p, 10)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
