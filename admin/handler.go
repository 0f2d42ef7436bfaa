package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// Options configure Handler and Serve.
type Options struct {
	// Gatherer is what /metrics serves. Nil: a registry of its own
	// holding Collector(g) and the Go runtime and process collectors. A
	// service that has a registry passes it here, with Collector(g)
	// registered in it.
	Gatherer prometheus.Gatherer
	// Pprof serves net/http/pprof under /debug/pprof/. Off by default:
	// profiles expose the process's internals.
	Pprof bool
	// Refresh is how often the status page reloads itself. Default 2s;
	// negative: never.
	Refresh time.Duration
	// Logger gets the errors of rendering, encoding and serving. Nil:
	// none.
	Logger *zap.Logger
}

// DefaultRefresh is the status page's default reload interval.
const DefaultRefresh = 2 * time.Second

type handler struct {
	g    Group
	opts Options
	mux  *http.ServeMux
}

// Handler returns the admin routes of g, to mount on a service's own mux
// (behind http.StripPrefix under a path of its choice: the status page's
// links are relative):
//
//	/metrics        Prometheus text format (promhttp) of opts.Gatherer
//	/stats          the Stats snapshot as JSON (StatsDoc)
//	/healthz        200 "ok" while g.Live(), else 503 with the reason
//	/readyz         200 "ready" while g.Ready(), else 503 "not ready: <why>"
//	/debug/pprof/   net/http/pprof, only with opts.Pprof
//	/               the status page
func Handler(g Group, opts Options) http.Handler {
	if opts.Refresh == 0 {
		opts.Refresh = DefaultRefresh
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Gatherer == nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(Collector(g), collectors.NewGoCollector(),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		opts.Gatherer = reg
	}
	h := &handler{g: g, opts: opts, mux: http.NewServeMux()}
	h.mux.Handle("GET /metrics", gzipFast(promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{
		ErrorLog:           zap.NewStdLog(opts.Logger),
		ErrorHandling:      promhttp.ContinueOnError, // serve what could be gathered
		DisableCompression: true,                     // gzipFast does it, cheaper
	})))
	h.mux.HandleFunc("GET /stats", h.serveStats)
	h.mux.HandleFunc("GET /healthz", h.serveHealthz)
	h.mux.HandleFunc("GET /readyz", h.serveReadyz)
	h.mux.HandleFunc("GET /{$}", h.servePage)
	if opts.Pprof {
		h.mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		h.mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		h.mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		h.mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		h.mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

func (h *handler) serveStats(w http.ResponseWriter, _ *http.Request) {
	s := h.g.Stats()
	b, err := json.MarshalIndent(newStatsDoc(&s, h.g, time.Now()), "", "  ")
	if err != nil {
		h.opts.Logger.Error("admin: encode /stats", zap.Error(err))
		http.Error(w, "admin: encode /stats: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(b, '\n'))
}

// serveHealthz is liveness: a stuck worker or a session lost for long
// fails it; lag does not.
func (h *handler) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	ok, why := h.g.Live()
	if !ok {
		plain(w, http.StatusServiceUnavailable, "not live: "+why)
		return
	}
	plain(w, http.StatusOK, "ok")
}

// serveReadyz is readiness: joined the group (with or without
// partitions), session not lost, not stopping (Run's ctx not ended).
func (h *handler) serveReadyz(w http.ResponseWriter, _ *http.Request) {
	if ready, why := readiness(h.g); !ready {
		if why == "" {
			why = "the group has not joined, lost its session, cannot join, or is stopping"
		}
		plain(w, http.StatusServiceUnavailable, "not ready: "+why)
		return
	}
	plain(w, http.StatusOK, "ready")
}

func plain(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}
