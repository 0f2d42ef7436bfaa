// Package otel traces Orderly's Do calls with OpenTelemetry, through the
// hook group.Config.Trace, so that package group itself imports no
// OpenTelemetry (as package admin keeps Prometheus out of it).
//
//	tp := sdktrace.NewTracerProvider(...)
//	cfg.Trace = otel.Trace(tp, otel.ConsumerGroup(cfg.GroupID))
//
// Every Do call, split calls on halves of a failed batch included, is one
// span of kind consumer named "process <topic>" ("process" when the batch
// mixes topics), with the OpenTelemetry messaging semantic conventions'
// attributes (see Trace). The span links to the trace context of each of
// its messages, read from the record's W3C traceparent and tracestate
// headers (or by another propagator, see Propagator), and its context is
// the one Do gets: spans that Do starts are its children. A failed call
// records its error and ends with status Error.
//
// A span for one message is also a child of that message's context, so
// the producer's trace continues into Do; one for a batch starts a trace
// of its own (or continues the one Do's ctx already carries) and reaches
// its messages' traces through its links. See Trace for why, and
// LinkOnly to make single-message spans roots too.
package otel
