package admin

import (
	"compress/gzip"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestMetricsCompression: /metrics is gzipped (at BestSpeed) for a client
// that accepts gzip, plain otherwise, and both decode to the same
// families.
func TestMetricsCompression(t *testing.T) {
	h := Handler(&fakeGroup{s: sampleStats(), ready: true, live: true}, Options{})
	families := map[string]int{}
	for _, tt := range []struct {
		accept string
		gzip   bool
	}{
		{"", false},
		{"gzip", true},
		{"identity", false},
		{"gzip;q=0, identity", false},
		{"deflate, gzip;q=0.5", true},
		{"*", true},
	} {
		req := httptest.NewRequest("GET", "/metrics", nil)
		if tt.accept != "" {
			req.Header.Set("Accept-Encoding", tt.accept)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		res := rec.Result()
		var body io.Reader = res.Body
		if got := res.Header.Get("Content-Encoding") == "gzip"; got != tt.gzip {
			t.Fatalf("Accept-Encoding %q: got Content-Encoding %q, want gzip %v", tt.accept, res.Header.Get("Content-Encoding"), tt.gzip)
		}
		if tt.gzip {
			zr, err := gzip.NewReader(res.Body)
			if err != nil {
				t.Fatalf("Accept-Encoding %q: %v", tt.accept, err)
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			t.Fatalf("Accept-Encoding %q: read: %v", tt.accept, err)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		mfs, err := p.TextToMetricFamilies(strings.NewReader(string(b)))
		if err != nil {
			t.Fatalf("Accept-Encoding %q: parse: %v", tt.accept, err)
		}
		if len(families) == 0 {
			for name := range mfs {
				families[name] = 1
			}
			if _, ok := families["orderly_fetched_records_total"]; !ok {
				t.Fatalf("no orderly_fetched_records_total among %d families", len(families))
			}
		} else if _, ok := mfs["orderly_fetched_records_total"]; !ok || len(mfs) < len(families)-2 {
			t.Fatalf("Accept-Encoding %q: got %d families, want about %d", tt.accept, len(mfs), len(families))
		}
	}
}

func TestAcceptsGzip(t *testing.T) {
	for header, want := range map[string]bool{
		"":                    false,
		"gzip":                true,
		"GZIP":                true,
		"br, gzip":            true,
		"gzip;q=0":            false,
		"gzip; q=0.000":       false,
		"gzip;q=0.001":        true,
		"identity":            false,
		"*":                   true,
		"x-gzip":              false,
		"deflate, gzip;q=1.0": true,
		"*;q=0, gzip":         true,
		"gzip;q=0, *":         false,
		"*;q=0":               false,
		"*; q=0.5":            true,
	} {
		if got := acceptsGzip(header); got != want {
			t.Errorf("acceptsGzip(%q): got %v, want %v", header, got, want)
		}
	}
}
