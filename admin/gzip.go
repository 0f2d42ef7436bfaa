package admin

import (
	"compress/gzip"
	"net/http"
	"strings"
	"sync"
)

// gzipFast compresses the responses of h for clients that accept gzip
// (Prometheus does), at gzip.BestSpeed: promhttp's own gzip uses the
// default level, which cost a third of a scrape's CPU for a few percent
// fewer bytes on text this repetitive. It is for handlers that write the
// whole body and no Content-Length (promhttp's).
func gzipFast(h http.Handler) http.Handler {
	pool := sync.Pool{New: func() any {
		w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed) // a valid level: never an error
		return w
	}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Vary", "Accept-Encoding")
		if !acceptsGzip(r.Header.Get("Accept-Encoding")) {
			h.ServeHTTP(w, r)
			return
		}
		gz := pool.Get().(*gzip.Writer)
		defer pool.Put(gz)
		gz.Reset(w)
		w.Header().Set("Content-Encoding", "gzip")
		h.ServeHTTP(&gzipWriter{ResponseWriter: w, gz: gz}, r)
		_ = gz.Close() // the client sees a short body if this fails
	})
}

type gzipWriter struct {
	http.ResponseWriter
	gz *gzip.Writer
}

func (w *gzipWriter) Write(b []byte) (int, error) { return w.gz.Write(b) }

// acceptsGzip reports whether an Accept-Encoding header value accepts
// gzip: an explicit gzip entry decides (q=0 refuses it), else a * entry.
func acceptsGzip(header string) bool {
	star := false
	for part := range strings.SplitSeq(header, ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		switch strings.ToLower(strings.TrimSpace(coding)) {
		case "gzip":
			return !zeroQ(params)
		case "*":
			star = !zeroQ(params)
		}
	}
	return star
}

// zeroQ reports whether the parameters of an Accept-Encoding entry give
// it q=0 (q=0, q=0., q=0.000).
func zeroQ(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
		if strings.EqualFold(strings.TrimSpace(k), "q") {
			v = strings.TrimSpace(v)
			return strings.HasPrefix(v, "0") && strings.Trim(v, "0.") == ""
		}
	}
	return false
}
