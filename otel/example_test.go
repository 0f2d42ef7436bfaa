package otel_test

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/orderly-go/orderly/group"
	orderlyotel "github.com/orderly-go/orderly/otel"
)

// A service sets Config.Trace with its tracer provider: every Do call is
// then a span, and Do's ctx carries it.
func ExampleTrace() {
	tp := sdktrace.NewTracerProvider() // with the service's exporter
	defer tp.Shutdown(context.Background())
	cfg := group.Config{
		Brokers: []string{"localhost:9092"},
		Topics:  []string{"transfers"},
		GroupID: "ledger",
	}
	cfg.Trace = orderlyotel.Trace(tp, orderlyotel.ConsumerGroup(cfg.GroupID))

	// What the worker does around each Do call:
	msg := &group.Message{Topic: "transfers", Partition: 3, Offset: 41, Attempt: 1, Headers: []group.Header{
		{Key: []byte("traceparent"), Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
	}}
	ctx, end := cfg.Trace(context.Background(), []*group.Message{msg})
	fmt.Println("Do runs in the record's trace:", trace.SpanContextFromContext(ctx).TraceID())
	end(nil) // Do's error
	// Output: Do runs in the record's trace: 4bf92f3577b34da6a3ce929d0e0e4736
}
