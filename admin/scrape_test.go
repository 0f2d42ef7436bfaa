package admin

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape is a parsed exposition: metric families by name.
type scrape map[string]*dto.MetricFamily

// parseText parses the Prometheus text format with expfmt's parser.
func parseText(t testing.TB, r io.Reader) scrape {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("parse the text format: %v", err)
	}
	return fams
}

// scrapeURL GETs url (a /metrics) and parses it.
func scrapeURL(t testing.TB, url string) scrape {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d, %v\n%s", url, resp.StatusCode, err, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("GET %s: content type %q, want the text format", url, ct)
	}
	return parseText(t, bytes.NewReader(body))
}

// gatherText gathers g, encodes it in the text format and parses it back:
// what a scrape sees.
func gatherText(t testing.TB, g prometheus.Gatherer) scrape {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			t.Fatalf("encode %s: %v", f.GetName(), err)
		}
	}
	return parseText(t, &buf)
}

// labels of m as a map.
func labelMap(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// find returns the metrics of family name whose labels include want
// ("name=value" pairs).
func (s scrape) find(name string, want ...string) []*dto.Metric {
	f := s[name]
	if f == nil {
		return nil
	}
	var out []*dto.Metric
next:
	for _, m := range f.GetMetric() {
		have := labelMap(m)
		for _, kv := range want {
			k, v, _ := strings.Cut(kv, "=")
			if have[k] != v {
				continue next
			}
		}
		out = append(out, m)
	}
	return out
}

// value is the value of the one series of family name with labels want;
// it fails the test unless exactly one matches.
func (s scrape) value(t testing.TB, name string, want ...string) float64 {
	t.Helper()
	ms := s.find(name, want...)
	if len(ms) != 1 {
		t.Fatalf("%s%v: got %d series, want 1", name, want, len(ms))
	}
	m := ms[0]
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	t.Fatalf("%s%v: not a counter or gauge", name, want)
	return 0
}

// pl is the label pairs of a partition's series.
func pl(topic string, part int32, more ...string) []string {
	return append([]string{"topic=" + topic, fmt.Sprintf("partition=%d", part)}, more...)
}
