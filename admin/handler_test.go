package admin

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// get serves one request of h and returns the status and body.
func get(t *testing.T, h http.Handler, method, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

func TestHealthEndpoints(t *testing.T) {
	for _, c := range []struct {
		name                 string
		ready, live          bool
		why                  string
		healthz, readyz      int
		healthBody, readyHas string
	}{
		{"before the join", false, true, "", 200, 503, "ok", "not ready"},
		{"joined", true, true, "", 200, 200, "ok", "ready"},
		{"a worker stuck", true, false, "1 workers stuck in Do past MsgTimeout (200ms) and its grace", 503, 200,
			"not live: 1 workers stuck in Do past MsgTimeout (200ms) and its grace", "ready"},
		{"session lost", false, false, "group session lost 1m0s ago", 503, 503, "not live: group session lost 1m0s ago", "not ready"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := Handler(&fakeGroup{s: sampleStats(), ready: c.ready, live: c.live, why: c.why}, Options{})
			code, body := get(t, h, "GET", "/healthz")
			if code != c.healthz || strings.TrimSpace(body) != c.healthBody {
				t.Errorf("/healthz: got %d %q, want %d %q", code, body, c.healthz, c.healthBody)
			}
			code, body = get(t, h, "GET", "/readyz")
			if code != c.readyz || !strings.HasPrefix(body, c.readyHas) {
				t.Errorf("/readyz: got %d %q, want %d starting %q", code, body, c.readyz, c.readyHas)
			}
		})
	}
}

func TestRoutes(t *testing.T) {
	f := &fakeGroup{s: sampleStats(), ready: true, live: true}
	for _, c := range []struct {
		name         string
		opts         Options
		method, path string
		want         int
	}{
		{"metrics", Options{}, "GET", "/metrics", 200},
		{"stats", Options{}, "GET", "/stats", 200},
		{"page", Options{}, "GET", "/", 200},
		{"no pprof unless asked", Options{}, "GET", "/debug/pprof/", 404},
		{"pprof when asked", Options{Pprof: true}, "GET", "/debug/pprof/", 200},
		{"pprof heap", Options{Pprof: true}, "GET", "/debug/pprof/heap?debug=1", 200},
		{"unknown path", Options{}, "GET", "/nosuch", 404},
		{"POST refused", Options{}, "POST", "/metrics", 405},
	} {
		t.Run(c.name, func(t *testing.T) {
			if code, body := get(t, Handler(f, c.opts), c.method, c.path); code != c.want {
				t.Errorf("%s %s: got %d, want %d\n%.300s", c.method, c.path, code, c.want, body)
			}
		})
	}
}

// TestStatsDocument: /stats decodes into StatsDoc with the snapshot's
// values, durations readable and parseable, and the field names stable.
func TestStatsDocument(t *testing.T) {
	f := &fakeGroup{s: sampleStats(), ready: true, live: false, why: "1 workers stuck"}
	code, body := get(t, Handler(f, Options{}), "GET", "/stats")
	if code != 200 {
		t.Fatalf("/stats: %d %s", code, body)
	}
	var d StatsDoc
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatalf("decode /stats: %v", err)
	}
	if d.ConsumerGroup != "ledger" || d.Status.Code != 5 || d.Status.Name != "STALL" || *d.Ready != true || *d.Live != false ||
		d.LiveReason != "1 workers stuck" {
		t.Fatalf("/stats head: got %q %+v ready %v live %v %q", d.ConsumerGroup, d.Status, *d.Ready, *d.Live, d.LiveReason)
	}
	if len(d.Partitions) != 2 || d.Partitions[1].OldestUnfinished != "1m35s" || d.Partitions[1].CommittedAt != nil ||
		d.Partitions[0].CommittedAt == nil || d.Partitions[1].Outcomes.Handled != 330 || !d.Partitions[1].Paused {
		t.Fatalf("/stats partitions: got %+v", d.Partitions)
	}
	if d.Workers[0].BatchAge != "1m35s" || !d.Workers[0].Stuck || d.Workers[1].BatchAge != "0s" {
		t.Fatalf("/stats workers: got %+v", d.Workers)
	}
	for _, w := range d.Workers {
		if _, err := time.ParseDuration(w.BatchAge); err != nil {
			t.Fatalf("batch_age %q: %v", w.BatchAge, err)
		}
	}
	h := d.HandlerDuration
	if h.Count != 8 || h.SumSeconds != 61 || len(h.Buckets) != 17 || h.Buckets[16].LE != "+Inf" || h.Buckets[16].Count != 1 ||
		h.Buckets[0].LE != "0.0005" || h.P50 != "500µs" || h.P50AboveLastBound || h.P99 != "1m0s" || !h.P99AboveLastBound {
		t.Fatalf("/stats handler_duration: got %+v", h)
	}
	if d.DeadLetters.ByReason["poison"] != 2 || d.DeadLetters.Destination != "topic:orders.dlq" || d.ErrorsBy.Network != 2 {
		t.Fatalf("/stats dead letters, errors: got %+v %+v", d.DeadLetters, d.ErrorsBy)
	}
	if tt := d.Totals; tt.OffsetResets != 2 || tt.SkippedByReset != 50 || tt.OutOfRangeMidRun != 1 || tt.ControlSkipped != 4 {
		t.Fatalf("/stats totals of offset resets: got %d %d %d %d, want 2 50 1 4", tt.OffsetResets, tt.SkippedByReset, tt.OutOfRangeMidRun, tt.ControlSkipped)
	}
	var totals map[string]json.RawMessage
	if err := json.Unmarshal(raw0(t, body)["totals"], &totals); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"offset_resets", "skipped_by_reset", "out_of_range_mid_run", "control_skipped"} {
		if _, ok := totals[k]; !ok {
			t.Errorf("/stats totals has no %q", k)
		}
	}
	// The names a client reads: a rename would break them.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"consumergroup", "time", "ready", "live", "live_reason", "status", "totals", "now", "errors_by",
		"dead_letters", "handler_duration", "end_to_end_latency", "workers", "partitions"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("/stats has no %q", k)
		}
	}
	var hist map[string]json.RawMessage
	if err := json.Unmarshal(raw["handler_duration"], &hist); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"count", "sum_seconds", "p50", "p99", "p50_above_last_bound", "p99_above_last_bound", "buckets"} {
		if _, ok := hist[k]; !ok {
			t.Errorf("/stats handler_duration has no %q", k)
		}
	}
	var parts []map[string]json.RawMessage
	if err := json.Unmarshal(raw["partitions"], &parts); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"topic", "partition", "generation", "status", "fetched", "next", "frontier", "committed",
		"committed_at", "high_watermark", "lag", "in_flight", "undispatched", "paused", "held", "finished_above",
		"metadata_bytes", "oldest_unfinished", "outcomes"} {
		if _, ok := parts[0][k]; !ok {
			t.Errorf("/stats partitions[0] has no %q", k)
		}
	}
}

func TestFormatNum(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0"}, {999, "999"}, {1000, "1000"}, {9999, "9999"}, {10000, "10\u2009000"},
		{1234567, "1\u2009234\u2009567"}, {-12345, "-12\u2009345"}, {-5, "-5"},
	} {
		if got := formatNum(c.n); got != c.want {
			t.Errorf("formatNum(%d): got %q, want %q", c.n, got, c.want)
		}
	}
}

func TestDurationString(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"}, {1234 * time.Nanosecond, "1µs"}, {1500 * time.Microsecond, "2ms"}, {95*time.Second + 123456789, "1m35.123s"},
	} {
		if got := durationString(c.d); got != c.want {
			t.Errorf("durationString(%v): got %q, want %q", c.d, got, c.want)
		}
	}
}

// raw0 is the top level of a /stats body, by key.
func raw0(t *testing.T, body string) map[string]json.RawMessage {
	t.Helper()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatal(err)
	}
	return raw
}
