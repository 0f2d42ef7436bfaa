package otel

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/orderly-go/orderly/group"
)

// call runs the hook once around a Do that returns err and reports the
// ctx Do saw and the one span recorded.
func call(t *testing.T, opts []Option, ctx context.Context, msgs []*group.Message, err error) (trace.SpanContext, sdktrace.ReadOnlySpan) {
	t.Helper()
	tp, sr := recorder(t)
	hook := Trace(tp, opts...)
	doCtx, end := hook(ctx, msgs)
	end(err)
	spans := sr.Ended()
	if len(spans) != 1 {
		t.Fatalf("got %d spans for one call, want 1", len(spans))
	}
	return trace.SpanContextFromContext(doCtx), spans[0]
}

// messages are n messages of topic/partition at offsets from base, the
// i-th carrying scs[i] (when scs is long enough).
func messages(topic string, part int32, base int64, n int, scs []trace.SpanContext) []*group.Message {
	out := make([]*group.Message, n)
	for i := range out {
		m := &group.Message{Topic: topic, Partition: part, Offset: base + int64(i), Value: []byte("value"), Attempt: 1}
		if i < len(scs) {
			m.Headers = traceHeaders(scs[i])
		}
		out[i] = m
	}
	return out
}

// TestSpanAttributes: the span's name, kind and attributes for one
// message, a batch of one partition, and a batch across topics.
func TestSpanAttributes(t *testing.T) {
	scs := spanContexts(1, 4)
	mixed := append(messages("orders", 0, 10, 2, scs[:2]), messages("refunds", 3, 7, 2, scs[2:])...)
	tests := []struct {
		name     string
		msgs     []*group.Message
		wantName string
		want     map[attribute.Key]any // attribute values; nil: must be absent
		linkAttr map[attribute.Key]any // on the first link
	}{
		{"one message", messages("orders", 2, 41, 1, scs), "process orders", map[attribute.Key]any{
			"messaging.system": "kafka", "messaging.operation.type": "process", "messaging.operation.name": "process",
			"messaging.consumer.group.name": "ledger", "messaging.destination.name": "orders",
			"messaging.destination.partition.id": "2", "messaging.kafka.offset": int64(41),
			"messaging.message.body.size": int64(5), "orderly.attempt": int64(1), "messaging.batch.message_count": nil,
		}, nil},
		{"batch of one partition", messages("orders", 2, 41, 3, scs), "process orders", map[attribute.Key]any{
			"messaging.destination.name": "orders", "messaging.destination.partition.id": "2",
			"messaging.batch.message_count": int64(3), "messaging.kafka.offset": nil, "orderly.attempt": nil,
		}, map[attribute.Key]any{"messaging.kafka.offset": int64(41), "messaging.destination.partition.id": nil}},
		{"batch across topics", mixed, "process", map[attribute.Key]any{
			"messaging.destination.name": nil, "messaging.destination.partition.id": nil, "messaging.batch.message_count": int64(4),
		}, map[attribute.Key]any{"messaging.kafka.offset": int64(10), "messaging.destination.partition.id": "0", "messaging.destination.name": "orders"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, span := call(t, []Option{ConsumerGroup("ledger")}, context.Background(), tt.msgs, nil)
			if span.Name() != tt.wantName || span.SpanKind() != trace.SpanKindConsumer {
				t.Errorf("span: got name %q kind %v, want %q consumer", span.Name(), span.SpanKind(), tt.wantName)
			}
			checkAttrs(t, "span", span.Attributes(), tt.want)
			if len(span.Links()) != len(tt.msgs) {
				t.Fatalf("links: got %d, want one per message (%d)", len(span.Links()), len(tt.msgs))
			}
			checkAttrs(t, "first link", span.Links()[0].Attributes, tt.linkAttr)
			if span.Status().Code != codes.Unset {
				t.Errorf("status of a call that succeeded: got %v, want Unset", span.Status())
			}
		})
	}
}

func checkAttrs(t *testing.T, what string, attrs []attribute.KeyValue, want map[attribute.Key]any) {
	t.Helper()
	for k, w := range want {
		v, ok := attr(attrs, k)
		switch {
		case w == nil && ok:
			t.Errorf("%s: got %s = %v, want none", what, k, v.Emit())
		case w != nil && (!ok || v.AsInterface() != w):
			t.Errorf("%s: got %s = %v (set: %v), want %v", what, k, v.AsInterface(), ok, w)
		}
	}
}

// TestParentAndLinks: who the span's parent is, what it links to, and
// which trace the ctx given to Do is in.
func TestParentAndLinks(t *testing.T) {
	scs := spanContexts(2, 3)
	ambient := spanContexts(3, 1)[0]
	tests := []struct {
		name      string
		opts      []Option
		ctx       context.Context
		msgs      []*group.Message
		parent    trace.SpanContext // zero: a root
		wantLinks int
	}{
		{"one message: child of its context", nil, context.Background(), messages("t", 0, 0, 1, scs), scs[0], 1},
		{"one message, LinkOnly: a root", []Option{LinkOnly()}, context.Background(), messages("t", 0, 0, 1, scs), trace.SpanContext{}, 1},
		{"one message, ambient span: child of the ambient", nil, trace.ContextWithSpanContext(context.Background(), ambient), messages("t", 0, 0, 1, scs), ambient, 1},
		{"one message without a context: a root", nil, context.Background(), messages("t", 0, 0, 1, nil), trace.SpanContext{}, 0},
		{"batch: a root", nil, context.Background(), messages("t", 0, 0, 3, scs), trace.SpanContext{}, 3},
		{"batch, ambient span: child of the ambient", nil, trace.ContextWithSpanContext(context.Background(), ambient), messages("t", 0, 0, 3, scs), ambient, 3},
		{"batch, some without a context", nil, context.Background(), messages("t", 0, 0, 5, scs[:2]), trace.SpanContext{}, 2},
		{"MaxLinks 0: no links, no parent", []Option{MaxLinks(0)}, context.Background(), messages("t", 0, 0, 1, scs), trace.SpanContext{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doCtx, span := call(t, tt.opts, tt.ctx, tt.msgs, nil)
			if !sameContext(doCtx, span.SpanContext()) {
				t.Fatalf("Do's ctx: got span %v, want the call's span %v", doCtx.SpanID(), span.SpanContext().SpanID())
			}
			if p := span.Parent(); !sameContext(p, tt.parent) {
				t.Errorf("parent: got %v/%v, want %v/%v", p.TraceID(), p.SpanID(), tt.parent.TraceID(), tt.parent.SpanID())
			}
			if tt.parent.IsValid() && doCtx.TraceID() != tt.parent.TraceID() {
				t.Errorf("Do's ctx: got trace %v, want the parent's %v", doCtx.TraceID(), tt.parent.TraceID())
			}
			links := span.Links()
			if len(links) != tt.wantLinks {
				t.Fatalf("links: got %d, want %d", len(links), tt.wantLinks)
			}
			for i, l := range links {
				if !sameContext(l.SpanContext, scs[i]) || !l.SpanContext.IsRemote() {
					t.Errorf("link %d: got %v/%v remote %v, want message %d's context %v/%v, remote", i,
						l.SpanContext.TraceID(), l.SpanContext.SpanID(), l.SpanContext.IsRemote(), i, scs[i].TraceID(), scs[i].SpanID())
				}
			}
		})
	}
}

// TestLinkCap: a Size 1024 batch gets DefaultMaxLinks links, to its
// first messages, and counts the rest; MaxLinks changes the cap.
func TestLinkCap(t *testing.T) {
	scs := spanContexts(4, 1024)
	tests := []struct {
		opts      []Option
		wantLinks int
	}{
		{nil, DefaultMaxLinks},
		{[]Option{MaxLinks(10)}, 10},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.wantLinks), func(t *testing.T) {
			_, span := call(t, tt.opts, context.Background(), messages("t", 0, 0, 1024, scs), nil)
			links := span.Links()
			if len(links) != tt.wantLinks || span.DroppedLinks() != 0 {
				t.Fatalf("links: got %d (SDK dropped %d), want %d", len(links), span.DroppedLinks(), tt.wantLinks)
			}
			for i, l := range links {
				if !sameContext(l.SpanContext, scs[i]) {
					t.Fatalf("link %d: not message %d's context", i, i)
				}
			}
			if v, _ := attr(span.Attributes(), UnlinkedKey); v.AsInt64() != int64(1024-tt.wantLinks) {
				t.Errorf("%s: got %d, want %d", UnlinkedKey, v.AsInt64(), 1024-tt.wantLinks)
			}
		})
	}
}

// TestFailedCalls: a failed call records its error, sets error.type and
// ends with status Error; a BatchError naming nothing is a success,
// alone or wrapped alone, not beside another error (group.AsBatchError),
// and one beside another error is not error.type batch. So is one,
// alone, that only defers items of the batch (group counts it in
// Stats.DeferredCalls); one that also fails or dead-letters an item is
// error.type batch. A call whose ctx a revoke or shutdown cancelled
// failed with error.type revoked or shutdown whatever BatchError it
// returned, deferrals only too (group hands its items back and counts it
// in Failures and Cancelled), unless the BatchError names nothing or Do
// panicked. A call
// past MsgTimeout failed with ErrTimeout whatever it returned, wrapping
// what it did return, as group counts it.
func TestFailedCalls(t *testing.T) {
	var named, none, outside, deferred, deferredOne, deferredFailed, deferredDead, deferredOutside group.BatchError
	named.Fail(0, errors.New("declined"))
	var namedRejected group.BatchError
	namedRejected.Fail(0, group.ErrRejected) // charged, as Fail: the verdicts decide
	outside.Fail(2, errors.New("declined"))  // the batch has items 0 and 1
	deferred.Defer(0, time.Second)
	deferred.Defer(1, time.Second)
	deferredOne.Defer(1, time.Second)
	deferredFailed.Defer(0, time.Second)
	deferredFailed.Fail(1, errors.New("declined"))
	deferredDead.Defer(0, time.Second)
	deferredDead.DeadLetter(1, errors.New("bad"))
	deferredOutside.Defer(2, time.Second)
	timedOut, cancel := context.WithCancelCause(context.Background())
	cancel(group.ErrTimeout)
	revoked, cancel2 := context.WithCancelCause(context.Background())
	cancel2(group.ErrRevoked)
	shutdown, cancel3 := context.WithCancelCause(context.Background())
	cancel3(group.ErrShutdown)
	pastDeadline, cancel4 := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel4()
	tests := []struct {
		name     string
		ctx      context.Context
		err      error
		wantType string // "": not failed
		wantMsg  string
	}{
		{"plain error", context.Background(), errors.New("db down"), ErrorOther, "db down"},
		{"rejected batch", context.Background(), fmt.Errorf("bulk insert: row 3 refused: %w", group.ErrRejected), ErrorRejected, "bulk insert: row 3 refused: group: batch rejected"},
		{"BatchError failing an item with ErrRejected", context.Background(), &namedRejected, ErrorBatch, "1 items failed; item 0: group: batch rejected"},
		{"panic with its stack", context.Background(), fmt.Errorf("%w in Do: boom\ngoroutine 7 [running]:", group.ErrPanic), ErrorPanic, "group: handler panicked in Do: boom"},
		{"BatchError naming an item", context.Background(), &named, ErrorBatch, "1 items failed; item 0: declined"},
		{"BatchError naming nothing", context.Background(), &none, "", ""},
		{"BatchError naming nothing, wrapped beside a failure", context.Background(), fmt.Errorf("tx commit: %w (%w)", errors.New("reset"), &none), ErrorOther, "tx commit: reset (0 items failed)"},
		{"BatchError naming an item, joined with a failure", context.Background(), errors.Join(errors.New("reset"), &named), ErrorOther, "reset"},
		{"BatchError naming nothing, wrapped alone", context.Background(), fmt.Errorf("store: %w", &none), "", ""},
		{"BatchError naming an item, joined with a nil", context.Background(), errors.Join(nil, &named), ErrorBatch, "1 items failed; item 0: declined"},
		{"BatchError naming only an item outside the batch", context.Background(), &outside, ErrorOther, "1 items failed; item 2: declined"},
		{"a nil *BatchError", context.Background(), (*group.BatchError)(nil), ErrorOther, "group: a nil *BatchError"},
		{"BatchError deferring every item", context.Background(), &deferred, "", ""},
		{"BatchError deferring an item, wrapped alone", context.Background(), fmt.Errorf("throttled: %w", &deferredOne), "", ""},
		{"BatchError deferring an item and failing another", context.Background(), &deferredFailed, ErrorBatch, "2 items failed; item 0: deferred; item 1: declined"},
		{"BatchError deferring an item and dead-lettering another", context.Background(), &deferredDead, ErrorBatch, "2 items failed; item 0: deferred; item 1: bad"},
		{"BatchError deferring only an item outside the batch", context.Background(), &deferredOutside, ErrorOther, "1 items failed; item 2: deferred"},
		{"BatchError deferring every item, joined with a failure", context.Background(), errors.Join(errors.New("reset"), &deferred), ErrorOther, "reset"},
		{"BatchError deferring every item past its timeout", timedOut, &deferred, ErrorTimeout, "group: Do ran past MsgTimeout (2 items failed; item 0: deferred; item 1: deferred)"},
		{"BatchError deferring every item after a revoke", revoked, &deferred, ErrorRevoked, "2 items failed; item 0: deferred; item 1: deferred"},
		{"BatchError deferring an item at a shutdown", shutdown, &deferredOne, ErrorShutdown, "1 items failed; item 1: deferred"},
		{"BatchError naming an item after a revoke", revoked, &named, ErrorRevoked, "1 items failed; item 0: declined"},
		{"BatchError naming nothing after a revoke", revoked, &none, "", ""},
		{"panic after a revoke", revoked, fmt.Errorf("%w in Do: boom\ngoroutine 7 [running]:", group.ErrPanic), ErrorPanic, "group: handler panicked in Do: boom"},
		{"timeout", timedOut, context.Canceled, ErrorTimeout, "group: Do ran past MsgTimeout (context canceled)"},
		{"BatchError past its timeout", timedOut, &named, ErrorTimeout, "group: Do ran past MsgTimeout (1 items failed; item 0: declined)"},
		{"BatchError naming nothing past its timeout", timedOut, &none, ErrorTimeout, group.ErrTimeout.Error()},
		{"panic past its timeout", timedOut, fmt.Errorf("%w in Do: boom\ngoroutine 7 [running]:", group.ErrPanic), ErrorTimeout, "group: Do ran past MsgTimeout (group: handler panicked in Do: boom"},
		{"ErrTimeout returned past its timeout", timedOut, fmt.Errorf("gave up: %w", group.ErrTimeout), ErrorTimeout, "gave up: " + group.ErrTimeout.Error()},
		{"nil past its timeout", timedOut, nil, ErrorTimeout, group.ErrTimeout.Error()},
		{"nil past its deadline, not yet cancelled", pastDeadline, nil, ErrorTimeout, group.ErrTimeout.Error()},
		{"nil after a revoke", revoked, nil, "", ""},
		{"revoked", revoked, context.Canceled, ErrorRevoked, "context canceled"},
		{"shutdown", shutdown, context.Canceled, ErrorShutdown, "context canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, span := call(t, nil, tt.ctx, messages("t", 0, 0, 2, nil), tt.err)
			typ, hasType := attr(span.Attributes(), "error.type")
			if tt.wantType == "" {
				if span.Status().Code != codes.Unset || hasType || len(span.Events()) != 0 {
					t.Fatalf("got status %v, error.type %v, %d events; want a success", span.Status(), typ.Emit(), len(span.Events()))
				}
				return
			}
			if st := span.Status(); st.Code != codes.Error || st.Description != tt.wantMsg {
				t.Errorf("status: got %v %q, want Error %q", st.Code, st.Description, tt.wantMsg)
			}
			if typ.AsString() != tt.wantType {
				t.Errorf("error.type: got %q, want %q", typ.AsString(), tt.wantType)
			}
			if ev := span.Events(); len(ev) != 1 || ev[0].Name != "exception" {
				t.Errorf("events: got %v, want one exception", ev)
			}
		})
	}
}

// testPropagator reads a made-up "x-trace" header: trace and span ID in
// hex, as trace.TraceIDFromHex and SpanIDFromHex take them, colon
// separated.
type testPropagator struct{}

func (testPropagator) Inject(context.Context, propagation.TextMapCarrier) {}
func (testPropagator) Fields() []string                                   { return []string{"x-trace"} }
func (testPropagator) Extract(ctx context.Context, c propagation.TextMapCarrier) context.Context {
	var tid, sid string
	if _, err := fmt.Sscanf(c.Get("x-trace"), "%32s:%16s", &tid, &sid); err != nil {
		return ctx
	}
	t, err1 := trace.TraceIDFromHex(tid)
	s, err2 := trace.SpanIDFromHex(sid)
	if err1 != nil || err2 != nil {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: t, SpanID: s, TraceFlags: trace.FlagsSampled}))
}

// TestHeaders: the propagator is configurable, header names match
// regardless of case, and a malformed traceparent gives no link.
func TestHeaders(t *testing.T) {
	sc := spanContexts(5, 1)[0]
	w3c := traceHeaders(sc)
	upper := []group.Header{{Key: []byte("TraceParent"), Value: w3c[0].Value}}
	tests := []struct {
		name    string
		opts    []Option
		headers []group.Header
		want    bool // a link to sc
	}{
		{"W3C", nil, w3c, true},
		{"W3C, name in another case", nil, upper, true},
		{"W3C, malformed", nil, []group.Header{{Key: []byte("traceparent"), Value: []byte("00-zz-01")}}, false},
		{"W3C, among other headers", nil, append([]group.Header{{Key: []byte("k"), Value: []byte("v")}}, w3c...), true},
		{"custom propagator", []Option{Propagator(testPropagator{})}, []group.Header{{Key: []byte("x-trace"), Value: []byte(sc.TraceID().String() + ":" + sc.SpanID().String())}}, true},
		{"custom propagator ignores traceparent", []Option{Propagator(testPropagator{})}, w3c, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &group.Message{Topic: "t", Headers: tt.headers, Attempt: 1}
			_, span := call(t, tt.opts, context.Background(), []*group.Message{m}, nil)
			got := len(span.Links()) == 1 && sameContext(span.Links()[0].SpanContext, sc)
			if got != tt.want || (!tt.want && len(span.Links()) != 0) {
				t.Errorf("got %d links (to the message's context: %v), want a link: %v", len(span.Links()), got, tt.want)
			}
		})
	}
}

// TestTraceState: the message's tracestate reaches the link.
func TestTraceState(t *testing.T) {
	sc := spanContexts(6, 1)[0]
	ts, err := trace.ParseTraceState("vendor=abc,other=1")
	if err != nil {
		t.Fatal(err)
	}
	m := &group.Message{Topic: "t", Headers: traceHeaders(sc.WithTraceState(ts)), Attempt: 1}
	_, span := call(t, nil, context.Background(), []*group.Message{m}, nil)
	if got := span.Links()[0].SpanContext.TraceState().String(); got != "vendor=abc,other=1" {
		t.Errorf("link's tracestate: got %q, want %q", got, "vendor=abc,other=1")
	}
}

// FuzzExtractW3C: the hook's own reading of traceparent and tracestate
// agrees with propagation.TraceContext's on every input.
func FuzzExtractW3C(f *testing.F) {
	sc := spanContexts(9, 1)[0]
	w3c := traceHeaders(sc)
	f.Add(string(w3c[0].Value), "")
	f.Add(string(w3c[0].Value), "vendor=abc,other=1")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "bad state!")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", "")
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-extra", "")
	f.Add("00-00000000000000000000000000000000-00f067aa0ba902b7-01", "")
	f.Add("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "")
	f.Add("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-04", "")
	f.Fuzz(func(t *testing.T, traceparent, tracestate string) {
		headers := []group.Header{{Key: []byte("traceparent"), Value: []byte(traceparent)}}
		if tracestate != "" {
			headers = append(headers, group.Header{Key: []byte("tracestate"), Value: []byte(tracestate)})
		}
		got := extractW3C(headers)
		c := carrier(headers)
		want := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), &c))
		if !got.Equal(want) || got.IsRemote() != want.IsRemote() || got.IsValid() != want.IsValid() {
			t.Fatalf("traceparent %q tracestate %q: got %v %v %v %q, want %v %v %v %q", traceparent, tracestate,
				got.TraceID(), got.SpanID(), got.TraceFlags(), got.TraceState(), want.TraceID(), want.SpanID(), want.TraceFlags(), want.TraceState())
		}
	})
}

// TestEndAllocatesNothingOnSuccess: ending the span of a call that
// succeeded, within its deadline, allocates nothing beyond what the span
// itself does (a no-op span here): the checks for a late call and an empty
// BatchError stay off the success path's heap.
func TestEndAllocatesNothingOnSuccess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	span := trace.SpanFromContext(context.Background()) // no-op
	if got := testing.AllocsPerRun(100, func() { end(ctx, span, nil, 1) }); got != 0 {
		t.Fatalf("allocations per successful call's end: got %v, want 0", got)
	}
}
