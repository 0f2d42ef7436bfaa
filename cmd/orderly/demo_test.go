package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/ledger"
)

// reportValue returns the value of the report line "name: value".
func reportValue(t *testing.T, out, name string) string {
	t.Helper()
	for line := range strings.Lines(out) {
		if v, ok := strings.CutPrefix(line, name+": "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("report has no %q line:\n%s", name, out)
	return ""
}

func wantLines(t *testing.T, out string, want map[string]string) {
	t.Helper()
	for name, v := range want {
		if got := reportValue(t, out, name); got != v {
			t.Errorf("%s: %s, want %s", name, got, v)
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s", out)
	}
}

// okReport are the lines every passing run shows.
var okReport = map[string]string{
	"lost":                        "0",
	"duplicates":                  "0",
	"order violations":            "0",
	"balances mismatched":         "0",
	"committed == high watermark": "yes",
}

func TestDemoEmbedded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := runCmd(ctx, "demo",
		"--messages", "5000", "--keys", "200", "--partitions", "4", "--poison", "7",
		"--io", "0", "--io-item", "0", "--fail", "0.05", "--progress", "off",
		// About 320 calls: none of them failing has a chance of 0.95^320,
		// under 1e-7 (at the default --size 64, about 85 calls: 1.3%).
		"--size", "16",
	)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	wantLines(t, out, okReport)
	wantLines(t, out, map[string]string{
		"run":             "complete",
		"planned":         "5000",
		"produced":        "5000",
		"handled":         "5000",
		"not handled":     "0",
		"poison produced": "7",
		"decode errors":   "7",
		"committed":       "5007",
		"partitions":      "4",
	})
	if reportValue(t, out, "failed calls") == "0" || reportValue(t, out, "split calls") == "0" {
		t.Errorf("--fail 0.05 caused no failed calls, or they were not split:\n%s", out)
	}
}

// TestDemoSkewed runs hot keys through small batches and a slow Do, with
// the progress output on, so that lanes wait behind their own failed
// batches while other lanes flow.
func TestDemoSkewed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := runCmd(ctx, "demo",
		"--messages", "3000", "--keys", "50", "--zipf", "1.1", "--num", "16", "--size", "8", "--ticker", "1ms",
		"--io", "200us", "--io-item", "0", "--fail", "0.1", "--progress", "on", "--seed", "7",
	)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	wantLines(t, out, okReport)
	wantLines(t, out, map[string]string{"produced": "3000", "decode errors": "0"})
}

// TestDemoTimeout: a run cut short by --timeout returns soon after, with
// an interruptedError naming --timeout and its value, and
// ORDERLY_TIMEOUT when the value came from there (nothing on the command
// line then says --timeout), as the --stuck-partition line does; its
// report is consistent.
func TestDemoTimeout(t *testing.T) {
	for _, tt := range []struct {
		name string
		vars map[string]string // ORDERLY_* variables
		args []string
		flag string // how the error and the stuck line name --timeout
	}{
		{"flag", nil, []string{"--timeout", "1s"}, "--timeout 1s"},
		{"variable", map[string]string{"ORDERLY_TIMEOUT": "1s"}, nil, "--timeout 1s (from ORDERLY_TIMEOUT)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			var stdout bytes.Buffer
			lookup := func(k string) (string, bool) { v, ok := tt.vars[k]; return v, ok }
			err := run(context.Background(), append([]string{"demo", "--messages", "2000", "--keys", "20", "--io-item", "20ms",
				"--progress", "off", "--stuck-partition", "0"}, tt.args...), env{stdout: &stdout, stderr: io.Discard, lookup: lookup})
			out := stdout.String()
			var interrupted *interruptedError
			if want := "timed out after " + tt.flag + ": "; !errors.As(err, &interrupted) || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("demo: got %v, want an interruptedError starting %q\n%s", err, want, out)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("timed-out run took %v to return", d)
			}
			if want := "--stuck-partition 0: the first Do call on it hangs until the run ends: SIGINT, SIGTERM or " + tt.flag + "\n"; !strings.Contains(out, want) {
				t.Errorf("stdout has no line %q:\n%s", want, out)
			}
			// The report is still printed, and what was booked is consistent.
			wantLines(t, out, map[string]string{"lost": "0", "duplicates": "0", "order violations": "0", "balances mismatched": "0"})
		})
	}
}

func TestDemoUnreachable(t *testing.T) {
	_, err := runCmd(context.Background(), "demo", "--brokers", "127.0.0.1:1", "--progress", "off")
	if err == nil || !strings.Contains(err.Error(), "connect to --brokers 127.0.0.1:1:") {
		t.Fatalf("demo against nothing: got %v, want an error naming --brokers", err)
	}
}

func TestVerdict(t *testing.T) {
	good := func() *demoReport {
		return &demoReport{
			Planned:  100,
			Produced: 100,
			Ledger:   ledger.Report{Produced: 100, Distinct: 100},
			Start:    map[int32]int64{0: 0, 1: 10},
			HW:       map[int32]int64{0: 60, 1: 60},
			Committed: map[int32]int64{
				0: 60, 1: 60,
			},
		}
	}
	if err := good().verdict(); err != nil {
		t.Fatalf("good report: %v", err)
	}
	for _, tc := range []struct {
		name   string
		break_ func(r *demoReport)
		want   string
	}{
		{"lost", func(r *demoReport) { r.Lost = 3 }, "lost 3 records behind the committed offsets"},
		{"not handled", func(r *demoReport) { r.Ledger.Distinct = 97 }, "3 of 100 produced transfers not handled"},
		{"not produced", func(r *demoReport) { r.Produced = 90 }, "produced 90 of 100 transfers"},
		{"order", func(r *demoReport) { r.Ledger.OrderViolations = 2 }, "2 order violations"},
		{"dups", func(r *demoReport) { r.Ledger.Duplicates = 1 }, "1 duplicates"},
		{"unknown", func(r *demoReport) { r.Ledger.Unknown = 1 }, "1 unknown records"},
		{"decode", func(r *demoReport) { r.Stats.DecodeErrors = 4 }, "4 decode errors, 0 poison"},
		{"balances", func(r *demoReport) { r.Mismatched = 5 }, "5 account balances mismatched"},
		{"behind", func(r *demoReport) { r.Committed[1] = 59 }, "committed offsets 0:60 1:59 != high watermarks 0:60 1:60"},
		{"missing", func(r *demoReport) { delete(r.Committed, 0) }, "committed offsets 1:60 != high watermarks"},
	} {
		r := good()
		tc.break_(r)
		err := r.verdict()
		if !errors.Is(err, errDemoFailed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: verdict %v, want %q", tc.name, err, tc.want)
		}
		var out bytes.Buffer
		r.write(&out)
		if tc.name == "behind" && reportValue(t, out.String(), "committed == high watermark") != "no" {
			t.Errorf("behind: report says committed == high watermark:\n%s", out.String())
		}
	}
	// A partition nothing was written to needs no commit.
	r := good()
	r.HW[2], r.Start[2] = 5, 5
	if err := r.verdict(); err != nil {
		t.Errorf("empty partition without a commit: %v", err)
	}
}

// TestVerdictInterrupted: an interrupted run is judged on what it did:
// transfers not produced or not handled, and commits short of the high
// watermarks, are no failure; a record lost behind a commit still is.
func TestVerdictInterrupted(t *testing.T) {
	interrupted := func() *demoReport {
		return &demoReport{
			Interrupted: "interrupted by SIGINT",
			Planned:     100,
			Produced:    40,
			Ledger:      ledger.Report{Produced: 100, Distinct: 30, Lost: 70},
			Stats:       group.Stats{Handled: 30},
			Start:       map[int32]int64{0: 0, 1: 0},
			HW:          map[int32]int64{0: 20, 1: 20},
			Committed:   map[int32]int64{0: 15, 1: 14},
		}
	}
	if err := interrupted().verdict(); err != nil {
		t.Errorf("interrupted run with nothing lost: got %v, want nil", err)
	}
	r := interrupted()
	r.Lost = 2
	if err := r.verdict(); !errors.Is(err, errDemoFailed) || !strings.Contains(err.Error(), "lost 2 records") ||
		!strings.Contains(err.Error(), "interrupted by SIGINT") {
		t.Errorf("interrupted run that lost 2: got %v, want a failure naming the loss and the interruption", err)
	}
	var out bytes.Buffer
	r.write(&out)
	wantLines(t, out.String(), map[string]string{
		"run":         "interrupted (interrupted by SIGINT): the figures are what happened until then",
		"planned":     "100",
		"produced":    "40",
		"not handled": "10",
		"lost":        "2",
		"committed":   "29",
	})
	if got, want := r.summary(), "interrupted by SIGINT: 40 of 100 transfers produced, 30 handled, 29 records committed, 2 lost"; got != want {
		t.Errorf("summary: got %q, want %q", got, want)
	}
}

func TestPlan(t *testing.T) {
	p := newPlan(1000, 10, 5, 0, 1)
	if p.transfers() != 1000 || len(p.recs) != 1005 {
		t.Fatalf("transfers %d, records %d", p.transfers(), len(p.recs))
	}
	var n uint32
	for k := range p.counts {
		n += p.counts[k]
	}
	if n != 1000 {
		t.Errorf("counts sum to %d, want 1000", n)
	}
	if p.recs[0].poison || p.recs[len(p.recs)-1].poison {
		t.Errorf("poison records should be spread inside, not at the ends")
	}
	// Poison sits at (i+1)*1005/6: 167, 335, 502, 670, 837.
	for _, tt := range []struct{ n, want int }{{0, 0}, {167, 0}, {168, 1}, {600, 3}, {1005, 5}, {5000, 5}} {
		if got := p.poisonIn(tt.n); got != tt.want {
			t.Errorf("poisonIn(%d): got %d, want %d", tt.n, got, tt.want)
		}
	}
}

// TestDemoMsgTimeoutWarned: a demo run logs at warn the drain capped below
// MsgTimeout only when --msg-timeout (or ORDERLY_MSG_TIMEOUT) chose it:
// left at its default, the group's own (5m, past what sarama's 60s
// rebalance timeout lets the drain cover), it is not warned of, as a
// library user's default is not. A chosen 5m is.
func TestDemoMsgTimeoutWarned(t *testing.T) {
	const capped = "DrainTimeout is capped at half of Sarama.Consumer.Group.Rebalance.Timeout, below MsgTimeout"
	for _, tt := range []struct {
		name     string
		vars     map[string]string // ORDERLY_* variables
		args     []string
		warnings int
	}{
		{"left at its default", nil, nil, 0},
		{"a short one chosen", nil, []string{"--msg-timeout", "10s"}, 0},
		{"the default chosen", nil, []string{"--msg-timeout", "5m"}, 1},
		{"chosen by its variable", map[string]string{"ORDERLY_MSG_TIMEOUT": "5m"}, nil, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var stdout, stderr bytes.Buffer
			lookup := func(k string) (string, bool) { v, ok := tt.vars[k]; return v, ok }
			args := append([]string{"demo", "--messages", "200", "--keys", "20", "--partitions", "2", "--io", "0", "--io-item", "0",
				"--fail", "0", "--progress", "off", "--log-level", "warn"}, tt.args...)
			if err := run(ctx, args, env{stdout: &stdout, stderr: &stderr, lookup: lookup}); err != nil {
				t.Fatalf("demo: %v\n%s", err, stdout.String())
			}
			if got := strings.Count(stderr.String(), capped); got != tt.warnings {
				t.Fatalf("warnings of the capped drain: got %d, want %d\n%s", got, tt.warnings, stderr.String())
			}
		})
	}
}

// TestGroupMsgTimeout: the group's MsgTimeout is --msg-timeout's value
// only when the flag was given; left at its default, or with no flag set
// at all (demoOpts made in code), it is 0, the group's default.
func TestGroupMsgTimeout(t *testing.T) {
	for _, tt := range []struct {
		name  string
		flags bool     // whether demoOpts has a flag set
		args  []string // parsed by it
		want  time.Duration
	}{
		{"no flag set", false, nil, 0},
		{"left at its default", true, nil, 0},
		{"given", true, []string{"--msg-timeout", "10s"}, 10 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := &demoOpts{msgTimeout: group.DefaultMsgTimeout}
			if tt.flags {
				o.fs = pflag.NewFlagSet("demo", pflag.ContinueOnError)
				o.fs.DurationVar(&o.msgTimeout, "msg-timeout", group.DefaultMsgTimeout, "")
				if err := o.fs.Parse(tt.args); err != nil {
					t.Fatal(err)
				}
			}
			got := func() (d time.Duration) {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("groupMsgTimeout: got panic %v, want %v", p, tt.want)
					}
				}()
				return o.groupMsgTimeout()
			}()
			if got != tt.want {
				t.Errorf("groupMsgTimeout: got %v, want %v", got, tt.want)
			}
		})
	}
}
