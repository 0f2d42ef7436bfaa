// Package admin is Orderly's operators' view of a running group: a
// Prometheus collector (Collector) and an HTTP handler (Handler, Serve)
// with /metrics, /stats (the Stats snapshot as JSON), /healthz, /readyz,
// /debug/pprof when asked for, and / (a status page that refreshes
// itself). It imports group, never the other way, so that a service that
// does not want client_golang does not get it; it works on any
// *group.Group[T] through the small interfaces Source and Group.
//
// Mounting it on a service's own mux, with the collector in the service's
// own registry:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(admin.Collector(g))
//	mux.Handle("/orderly/", http.StripPrefix("/orderly", admin.Handler(g, admin.Options{Gatherer: reg})))
//
// or a listener of its own:
//
//	go admin.Serve(ctx, "127.0.0.1:8080", g, admin.Options{})
//
// Every metric, its labels and its meaning are listed in the README
// ("Operating it"); docs/ARCHITECTURE.md ("The operators' view") says how
// the package is built. The names are fixed.
package admin
