package otel

import (
	"context"
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/orderly-go/orderly/group"
)

// discard is a span processor that drops every span: the cost measured
// is the hook's and the SDK's recording, not an exporter's.
type discard struct{}

func (discard) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (discard) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (discard) Shutdown(context.Context) error                  { return nil }
func (discard) ForceFlush(context.Context) error                { return nil }

// BenchmarkHook is the hook's cost per Do call, for Size 1 and Size 64
// batches whose every record carries a W3C trace context: "none" calls a
// no-op Do without the hook; "noop" traces with the no-op provider
// (headers are still read for the links); "sdk" records every span with
// the SDK (links and attributes kept, exported nowhere); "unsampled"
// with the SDK's NeverSample.
func BenchmarkHook(b *testing.B) {
	do := func(ctx context.Context, batch []*group.Message) error { return nil }
	providers := []struct {
		name string
		tp   trace.TracerProvider // nil: no hook
	}{
		{"none", nil},
		{"noop", noop.NewTracerProvider()},
		{"sdk", sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(discard{}))},
		{"unsampled", sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithSpanProcessor(discard{}))},
	}
	for _, size := range []int{1, 64} {
		msgs := messages("orders", 3, 1000, size, spanContexts(8, size))
		for _, p := range providers {
			b.Run(fmt.Sprintf("size=%d/%s", size, p.name), func(b *testing.B) {
				ctx := context.Background()
				if p.tp == nil {
					b.ReportAllocs()
					for b.Loop() {
						_ = do(ctx, msgs)
					}
					return
				}
				hook := Trace(p.tp, ConsumerGroup("ledger"))
				b.ReportAllocs()
				for b.Loop() {
					doCtx, end := hook(ctx, msgs)
					end(do(doCtx, msgs))
				}
			})
		}
	}
}
