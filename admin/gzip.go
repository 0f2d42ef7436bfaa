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

// acceptsGzip reports whether an Accept-Encoding header value lists gzip
// (or *) without q=0.
func acceptsGzip(header string) bool {
	for part := range strings.SplitSeq(header, ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		coding = strings.ToLower(strings.TrimSpace(coding))
		if coding != "gzip" && coding != "*" {
			continue
		}
		q := strings.ReplaceAll(strings.ToLower(params), " ", "")
		if q == "q=0" || strings.HasPrefix(q, "q=0.0") && strings.Trim(q[3:], "0.") == "" {
			return false
		}
		return true
	}
	return false
}
