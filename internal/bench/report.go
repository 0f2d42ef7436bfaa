package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Output file names under Options.Out.
const (
	ResultsFile = "results.json"
	TableFile   = "table.md"
	ChartFile   = "chart.png"
)

// Report is a whole benchmark run, as written to results.json.
type Report struct {
	Command   string         `json:"command"`
	Machine   Machine        `json:"machine"`
	Started   time.Time      `json:"started"`
	Duration  Seconds        `json:"duration_s"`
	Rounds    int            `json:"rounds"`
	Scenarios []ScenarioInfo `json:"scenarios"`
	Rows      []*Row         `json:"rows"`
	Stall     []*StallResult `json:"stall,omitempty"`
	Notes     []string       `json:"notes"`
	index     map[[3]string]*Row
}

// Machine describes where the numbers were measured.
type Machine struct {
	CPU        string `json:"cpu"`
	NumCPU     int    `json:"num_cpu"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	Go         string `json:"go"`
}

// ScenarioInfo describes a scenario's data set.
type ScenarioInfo struct {
	Name       string  `json:"name"`
	Topic      string  `json:"topic"`
	Messages   int     `json:"messages"`
	Partitions int     `json:"partitions"`
	Keys       int     `json:"keys"`
	Zipf       float64 `json:"zipf,omitempty"`
	HotKey     string  `json:"hot_key"`
	HotCount   int     `json:"hot_count"`
	Value      int     `json:"value_bytes,omitempty"`
	ProducedS  Seconds `json:"produced_s"`
	Note       string  `json:"note"`
	// CaseData are the cases with a data set of their own, in case order.
	CaseData []CaseData `json:"case_data,omitempty"`
}

// CaseData is a case that ran on a data set of its own.
type CaseData struct {
	Case     string `json:"case"`
	Messages int    `json:"messages"`
}

// Row is one contender in one case of a scenario, over all rounds.
type Row struct {
	Scenario  string `json:"scenario"`
	Case      string `json:"case"`
	Num       int    `json:"num"`
	Contender string `json:"contender"`

	Rates    []float64 `json:"rates"`          // msg/s per round, first to last handled
	Elapsed  []Seconds `json:"elapsed_s"`      // per round
	Totals   []Seconds `json:"total_s"`        // per round, group join included
	Failed   []int64   `json:"failed"`         // failed calls per round
	CPU      []float64 `json:"cpu_us_per_msg"` // process CPU µs per message, per round
	Median   float64   `json:"median"`         // msg/s
	MedianEl Seconds   `json:"median_elapsed_s"`
	MedianTo Seconds   `json:"median_total_s"`
	MedCPU   float64   `json:"median_cpu_us_per_msg"`
	RSSPeak  []uint64  `json:"rss_peak,omitempty"`  // scale: the run's peak RSS (VmHWM), per round
	RSSAbove []uint64  `json:"rss_above,omitempty"` // scale: that peak less the RSS the run started from

	Baseline string  `json:"baseline,omitempty"` // "raw", "limit", "cap" or "<case>/<contender>"
	Ratio    float64 `json:"ratio,omitempty"`    // median of per-round rate / baseline rate (PairedRatio)
	Target   float64 `json:"target,omitempty"`   // orderly's moonshot ratio
	Note     string  `json:"note,omitempty"`

	baseline, baselineCase string
}

// Seconds is a duration in seconds in JSON.
type Seconds float64

func secs(d time.Duration) Seconds { return Seconds(d.Seconds()) }

// Duration is s as a time.Duration.
func (s Seconds) Duration() time.Duration { return time.Duration(float64(s) * float64(time.Second)) }

// fetchWait is the fetch wait every Kafka contender uses.
func fetchWait() time.Duration { return SaramaConfig(0).Consumer.MaxWaitTime }

func newReport(opts Options) *Report {
	return &Report{
		Command: opts.Command,
		Machine: machine(),
		Started: time.Now(),
		Rounds:  opts.Rounds,
		index:   map[[3]string]*Row{},
		Notes: []string{
			"Throughput is timed from the start of the first handler call to the end of the last; 'total' includes the group join.",
			"Each round runs every contender back to back, in an order rotated by one every round (A B C, B C A, C A B, ...; each position once over as many rounds as contenders, though a contender always follows the same other one unless it runs first), and every timed run starts after a runtime.GC(), so that no contender pays for collecting the previous run's garbage.",
			"Ratios are medians of per-round ratios. CPU/msg is the whole process's user+system CPU over the run (join, shutdown and the in-process broker included) per message: less sensitive than msg/s to other load on the machine.",
			fmt.Sprintf("Every Kafka contender uses the same sarama config: V3_0_0_0, OffsetOldest, cooperative-sticky, ChannelBufferSize=Chan, default fetch sizes, a %v fetch wait (group.DefaultSarama's MaxWaitTime).", fetchWait()),
			fmt.Sprintf("franz is a plain franz-go (kgo) consumer-group loop, franz-go's goroutine-per-partition pattern: the handler once per record, MarkCommitRecords per record (AutoCommitMarks); 1 MiB per partition per fetch (both clients' default), the same %v fetch wait, from the start, cooperative-sticky.", fetchWait()),
			"raw and databus have no retry concept: a failing call is repeated inline at once; orderly retries it after Retry.Backoff = 1 ms (doubling, at most 10 ms) while other lanes go on.",
			fmt.Sprintf("databus has no 'never wait': where a case says none, its Ticker is %v (Size > 1) or the seed's 5s (Size = 1, every message is a full batch).", DatabusTicker),
			"The broker runs in-process: its CPU and memory are included in every measurement.",
		},
	}
}

func machine() Machine {
	m := Machine{NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), OS: runtime.GOOS, Arch: runtime.GOARCH, Go: runtime.Version()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

func (r *Report) addScenario(s scenario, ds *dataset) {
	var own []CaseData
	for _, c := range s.Cases {
		if c.Messages > 0 {
			own = append(own, CaseData{c.Label, c.Messages})
		}
	}
	r.Scenarios = append(r.Scenarios, ScenarioInfo{
		Name: s.Name, Topic: ds.Topic, Messages: ds.Messages, Partitions: ds.Partitions, Keys: ds.Keys,
		Zipf: ds.Zipf, Value: ds.valueSize(), HotKey: ds.HotKey, HotCount: ds.HotCount, ProducedS: secs(ds.Produced), Note: s.Note,
		CaseData: own,
	})
}

func (r *Report) addRow(s scenario, c caseSpec, contender string) *Row {
	row := &Row{Scenario: s.Name, Case: c.Label, Num: c.Num, Contender: contender,
		baseline: c.Baseline, baselineCase: c.BaselineCase}
	if contender == "orderly" {
		row.Target = c.Target
	}
	r.Rows = append(r.Rows, row)
	r.index[[3]string{s.Name, c.Label, contender}] = row
	return row
}

func (row *Row) add(res Result) {
	row.Rates = append(row.Rates, res.Rate())
	row.Elapsed = append(row.Elapsed, secs(res.Elapsed))
	row.Totals = append(row.Totals, secs(res.Total))
	row.Failed = append(row.Failed, res.Failed)
	row.CPU = append(row.CPU, float64(res.CPUPerMsg())/float64(time.Microsecond))
	if res.RSSPeak > 0 {
		row.RSSPeak = append(row.RSSPeak, res.RSSPeak)
		row.RSSAbove = append(row.RSSAbove, res.RSSPeak-min(res.RSSStart, res.RSSPeak))
	}
}

// finish computes medians and ratios.
func (r *Report) finish() {
	r.Duration = secs(time.Since(r.Started))
	for _, row := range r.Rows {
		if len(row.Rates) > 0 {
			row.Median = Median(row.Rates)
			row.MedianEl = Median(row.Elapsed)
			row.MedianTo = Median(row.Totals)
			row.MedCPU = Median(row.CPU)
		}
	}
	for _, row := range r.Rows {
		var base *Row
		switch {
		case strings.HasPrefix(row.Contender, "cap"): // computed, compared with nothing
		case row.baselineCase != "":
			base = r.index[[3]string{row.Scenario, row.baselineCase, row.Contender}]
			if base != nil {
				row.Baseline = row.baselineCase + "/" + row.Contender
			}
		case row.baseline != "" && row.baseline != row.Contender:
			base = r.index[[3]string{row.Scenario, row.Case, row.baseline}]
			if base != nil {
				row.Baseline = row.baseline
			}
		}
		if base != nil {
			row.Ratio = PairedRatio(row.Rates, base.Rates, base.Median)
		}
	}
}

// Median is the median of xs (the mean of the middle two for an even
// count); 0 for none.
func Median[T ~float64](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// PairedRatio compares a row with its baseline: the median over rounds of
// the ratio of the two rates measured in the same round (alternating
// rounds pair measurements taken close in time, so drifting machine load
// cancels out), or, when the baseline has no rounds of its own (the
// computed cap), the median rate over baseMedian.
func PairedRatio(rates, baseRates []float64, baseMedian float64) float64 {
	if len(rates) == 0 {
		return 0
	}
	if len(baseRates) != len(rates) {
		return Ratio(Median(rates), baseMedian)
	}
	rs := make([]float64, len(rates))
	for i := range rates {
		rs[i] = Ratio(rates[i], baseRates[i])
	}
	return Median(rs)
}

// Ratio is a/b, or 0 when b is not positive.
func Ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// FormatCount formats a count or a rate in at most 5 characters, with 3 or
// 4 significant digits: 950, 1234, 12.3k, 123k, 1.23M, 12.3M, 123M.
func FormatCount(n float64) string {
	switch {
	case n >= 99.95e6:
		return fmt.Sprintf("%.0fM", n/1e6)
	case n >= 9.995e6:
		return fmt.Sprintf("%.1fM", n/1e6)
	case n >= 999.5e3:
		return fmt.Sprintf("%.2fM", n/1e6)
	case n >= 99.95e3:
		return fmt.Sprintf("%.0fk", n/1e3)
	case n >= 1e4:
		return fmt.Sprintf("%.1fk", n/1e3)
	}
	return fmt.Sprintf("%.0f", n)
}

// RoundDuration rounds d to about four significant digits: 1.234s,
// 12.35ms, 987µs.
func RoundDuration(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// minJudged is the shortest median run a target is judged on: a shorter
// one measures the group join's tail and the first fetch, not throughput.
const minJudged = 100 * time.Millisecond

// WriteMarkdown writes the results as Markdown tables.
func (r *Report) WriteMarkdown(w io.Writer) error {
	b := &strings.Builder{}
	if len(r.Rows) > 0 {
		fmt.Fprintf(b, "| scenario | case | contender | median msg/s | ratio | vs | target | elapsed | total incl. join | CPU/msg |\n")
		fmt.Fprintf(b, "| --- | --- | --- | ---: | ---: | --- | --- | ---: | ---: | ---: |\n")
		for _, row := range r.Rows {
			ratio, target, elapsed, total, cpu := "", "", "", "", ""
			if row.Baseline != "" {
				ratio = fmt.Sprintf("%.2fx", row.Ratio)
			}
			if row.Target > 0 && row.Median > 0 && row.Baseline != "" {
				verdict := "met"
				switch {
				case row.MedianEl.Duration() < minJudged:
					verdict = "too short to judge (--messages)"
				case row.Ratio < row.Target:
					verdict = "not met"
				}
				target = fmt.Sprintf(">= %.2fx: %s", row.Target, verdict)
			}
			if len(row.Rates) > 0 {
				elapsed = fmtDur(row.MedianEl)
				total = fmtDur(row.MedianTo)
				cpu = fmtMicros(row.MedCPU)
			}
			median := FormatCount(row.Median)
			if strings.HasPrefix(row.Contender, "cap") {
				median += " (computed)"
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
				row.Scenario, row.Case, row.Contender, median, ratio, row.Baseline, target, elapsed, total, cpu)
		}
	}
	r.writeScale(b)
	if len(r.Stall) > 0 {
		b.WriteString("\n")
		writeStallMarkdown(b, r.Stall)
	}
	b.WriteString("\n")
	r.writeMeasuredCap(b)
	r.writeConcurrentCap(b)
	for _, s := range r.Scenarios {
		fmt.Fprintf(b, "- %s: %d messages, %d partitions, %d keys", s.Name, s.Messages, s.Partitions, s.Keys)
		for _, c := range s.CaseData {
			fmt.Fprintf(b, " (%s: %d messages)", c.Case, c.Messages)
		}
		if s.Zipf > 0 {
			fmt.Fprintf(b, " (Zipf s=%g, hottest key %.1f%%)", s.Zipf, 100*float64(s.HotCount)/float64(max(s.Messages, 1)))
		}
		fmt.Fprintf(b, "; %s.\n", s.Note)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(b, "- %s\n", n)
	}
	fmt.Fprintf(b, "- Medians of %d alternating rounds. Machine: %s, %d CPUs (GOMAXPROCS %d), %s/%s, %s.\n",
		r.Rounds, r.Machine.CPU, r.Machine.NumCPU, r.Machine.GOMAXPROCS, r.Machine.OS, r.Machine.Arch, r.Machine.Go)
	if r.Command != "" {
		fmt.Fprintf(b, "- Command: `%s`\n", r.Command)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeMeasuredCap lists each contender's ratio to the key-order cap
// computed with the measured cost of a call, next to the nominal one the
// table uses.
func (r *Report) writeMeasuredCap(w io.Writer) {
	for _, capRow := range r.Rows {
		if capRow.Contender != CapMeasured || capRow.Median <= 0 {
			continue
		}
		parts := r.ratiosTo(capRow, capRow.Median, "")
		fmt.Fprintf(w, "- %s %s against the cap with the measured call cost (%s msg/s; %s): %s.\n",
			capRow.Scenario, capRow.Case, FormatCount(capRow.Median), capRow.Note, strings.Join(parts, ", "))
	}
}

// writeConcurrentCap lists ratios to the key-order cap computed with the
// cost of a call measured under the same concurrency: the limit
// contender's Num goroutines doing the same calls in the same rounds take
// Num/limit seconds per call (a 1 ms sleep costs more with Num sleepers
// than alone). It is the bound a perfect scheduler could reach here.
func (r *Report) writeConcurrentCap(w io.Writer) {
	for _, capRow := range r.Rows {
		if capRow.Contender != "cap" {
			continue
		}
		limit := r.index[[3]string{capRow.Scenario, capRow.Case, "limit"}]
		i := slices.IndexFunc(r.Scenarios, func(s ScenarioInfo) bool { return s.Name == capRow.Scenario })
		if limit == nil || limit.Median <= 0 || limit.Num == 0 || i < 0 || r.Scenarios[i].HotCount == 0 {
			continue
		}
		info := r.Scenarios[i]
		perCall := float64(limit.Num) / limit.Median // seconds per call under Num-way concurrency
		capConc := float64(info.Messages) / (float64(info.HotCount) * perCall)
		parts := r.ratiosTo(capRow, capConc, "limit")
		fmt.Fprintf(w, "- %s %s against the cap with the call cost measured under the same concurrency (%s msg/s: limit's %d goroutines take %.3f ms per call): %s.\n",
			capRow.Scenario, capRow.Case, FormatCount(capConc), limit.Num, perCall*1000, strings.Join(parts, ", "))
	}
}

// ratiosTo formats "<contender> <ratio>x" for each measured contender of
// row's case but skip, compared with rate.
func (r *Report) ratiosTo(row *Row, rate float64, skip string) []string {
	var parts []string
	for _, name := range ContenderNames {
		c := r.index[[3]string{row.Scenario, row.Case, name}]
		if name != skip && c != nil && c.Median > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2fx", name, Ratio(c.Median, rate)))
		}
	}
	return parts
}

func fmtMicros(us float64) string {
	if us >= 100 {
		return fmt.Sprintf("%.0f µs", us)
	}
	return fmt.Sprintf("%.2f µs", us)
}

func fmtDur(s Seconds) string { return RoundDuration(s.Duration()).String() }

func (r *Report) writeJSON(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: encode results: %w", err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}
