package otel

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/orderly-go/orderly/group"
)

// recorder is an SDK tracer provider that samples every span and keeps
// the ended ones.
func recorder(t testing.TB) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, sr
}

// spanContexts makes n distinct sampled remote span contexts, as
// producers in n different traces would inject them.
func spanContexts(seed uint64, n int) []trace.SpanContext {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]trace.SpanContext, n)
	for i := range out {
		var tid trace.TraceID
		var sid trace.SpanID
		binary.BigEndian.PutUint64(tid[:8], rng.Uint64()|1)
		binary.BigEndian.PutUint64(tid[8:], rng.Uint64())
		binary.BigEndian.PutUint64(sid[:], rng.Uint64()|1)
		out[i] = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	}
	return out
}

// traceHeaders are the W3C headers that carry sc.
func traceHeaders(sc trace.SpanContext) []group.Header {
	m := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), m)
	var hs []group.Header
	for _, k := range m.Keys() {
		hs = append(hs, group.Header{Key: []byte(k), Value: []byte(m[k])})
	}
	return hs
}

// sameContext compares trace and span IDs (and not remoteness).
func sameContext(a, b trace.SpanContext) bool {
	return a.TraceID() == b.TraceID() && a.SpanID() == b.SpanID()
}

// attr is the value of key among attrs, and whether it is there.
func attr(attrs []attribute.KeyValue, key attribute.Key) (attribute.Value, bool) {
	for _, a := range attrs {
		if a.Key == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}
