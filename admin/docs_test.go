package admin

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v2"
)

// The README's "Operating it" lists every metric in a table:
//
//	| `orderly_consumergroup_lag` | gauge | consumergroup, topic, partition | ... |
var metricRow = regexp.MustCompile("^\\| `(orderly_[a-z_]+)` \\| (counter|gauge|histogram) \\| ([a-z_, ]+) \\|")

// documentedMetric is a row of that table.
type documentedMetric struct {
	typ    string
	labels []string // sorted
}

func readmeMetrics(t *testing.T) map[string]documentedMetric {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]documentedMetric{}
	for line := range strings.Lines(string(b)) {
		m := metricRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var labels []string
		for l := range strings.SplitSeq(m[3], ",") {
			labels = append(labels, strings.TrimSpace(l))
		}
		sort.Strings(labels)
		out[m[1]] = documentedMetric{typ: m[2], labels: labels}
	}
	if len(out) == 0 {
		t.Fatal("README.md: no metrics table found")
	}
	return out
}

// checkDocumented: every metric the README documents is in the scrape
// with its type and exactly its labels, and the scrape has no orderly_
// metric the README does not document.
func checkDocumented(t *testing.T, sc scrape) {
	t.Helper()
	doc := readmeMetrics(t)
	types := map[dto.MetricType]string{dto.MetricType_COUNTER: "counter", dto.MetricType_GAUGE: "gauge", dto.MetricType_HISTOGRAM: "histogram"}
	for name, d := range doc {
		f := sc[name]
		if f == nil {
			t.Errorf("%s: documented, not in the scrape", name)
			continue
		}
		if got := types[f.GetType()]; got != d.typ {
			t.Errorf("%s: type %s, documented %s", name, got, d.typ)
		}
		for _, m := range f.GetMetric() {
			var got []string
			for _, l := range m.GetLabel() {
				got = append(got, l.GetName())
			}
			sort.Strings(got)
			if !slices.Equal(got, d.labels) {
				t.Errorf("%s: labels %v, documented %v", name, got, d.labels)
				break
			}
		}
	}
	for name := range sc {
		if _, ok := doc[name]; strings.HasPrefix(name, "orderly_") && !ok {
			t.Errorf("%s: in the scrape, not documented in the README", name)
		}
	}
}

// promQLName matches the orderly metric names in an expression.
var promQLName = regexp.MustCompile(`\borderly_[a-zA-Z0-9_]+`)

// metricsIn returns the orderly metric names in expr, a histogram's
// _bucket, _sum and _count series named as its family.
func metricsIn(expr string, sc scrape) []string {
	var out []string
	for _, n := range promQLName.FindAllString(expr, -1) {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(n, suffix); ok && sc[base] != nil && sc[base].GetType() == dto.MetricType_HISTOGRAM {
				n = base
			}
		}
		out = append(out, n)
	}
	return out
}

// deployExprs returns the PromQL expressions of the alert rules and the
// dashboard, each with where it came from.
func deployExprs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	b, err := os.ReadFile("../deploy/prometheus/orderly-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("orderly-alerts.yml: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" {
				t.Fatalf("orderly-alerts.yml: a rule of group %s without alert or expr: %+v", g.Name, r)
			}
			out["alert "+r.Alert] = r.Expr
		}
	}
	b, err = os.ReadFile("../deploy/grafana/orderly.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("orderly.json: %v", err)
	}
	for _, p := range dash.Panels {
		for i, tg := range p.Targets {
			out["panel "+p.Title+" #"+string(rune('A'+i))] = tg.Expr
		}
	}
	for _, v := range dash.Templating.List {
		if v.Definition != "" {
			out["variable "+v.Name] = v.Definition
		}
	}
	return out
}

// checkDeploy: every metric named in the alert rules and the dashboard is
// in the scrape, and each of the four alerts and the dashboard's
// panels are there.
func checkDeploy(t *testing.T, sc scrape) {
	t.Helper()
	exprs := deployExprs(t)
	seen := map[string]bool{}
	for where, expr := range exprs {
		names := metricsIn(expr, sc)
		if len(names) == 0 {
			t.Errorf("%s: names no orderly metric: %s", where, expr)
		}
		for _, n := range names {
			seen[n] = true
			if sc[n] == nil {
				t.Errorf("%s: %s is not in /metrics", where, n)
			}
		}
	}
	for _, n := range []string{"orderly_consumergroup_lag", "orderly_records_total", "orderly_handler_duration_seconds",
		"orderly_end_to_end_latency_seconds", "orderly_partition_status", "orderly_workers_stuck", "orderly_dead_letters_total"} {
		if !seen[n] {
			t.Errorf("deploy/ does not use %s", n)
		}
	}
	for _, a := range []string{"alert OrderlyLagGrowing", "alert OrderlyPartitionNotProgressing", "alert OrderlyWorkersStuck", "alert OrderlyDeadLetters"} {
		if exprs[a] == "" {
			t.Errorf("orderly-alerts.yml has no %s", a)
		}
	}
	if !strings.Contains(exprs["alert OrderlyPartitionNotProgressing"], "orderly_partition_status >= 4") {
		t.Errorf("the STALL/STOP alert: got %q, want orderly_partition_status >= 4", exprs["alert OrderlyPartitionNotProgressing"])
	}
	t.Logf("deploy/: %d expressions, %d metrics, all in /metrics", len(exprs), len(seen))
}

// TestDeployParses: the files parse and name only metrics the collector
// exports (the live test checks them against a real scrape).
func TestDeployParses(t *testing.T) {
	known := scrape{}
	for _, n := range MetricNames() {
		known[n] = &dto.MetricFamily{}
	}
	known[doDurationName].Type = dto.MetricType_HISTOGRAM.Enum()
	known[latencyName].Type = dto.MetricType_HISTOGRAM.Enum()
	for where, expr := range deployExprs(t) {
		for _, n := range metricsIn(expr, known) {
			if known[n] == nil {
				t.Errorf("%s: %s is not a metric the collector exports", where, n)
			}
		}
	}
}
