package otel

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/merge"
)

// TracerName is the instrumentation scope of the spans Trace starts.
const TracerName = "github.com/orderly-go/orderly/otel"

// DefaultMaxLinks is the most links a span gets by default: the
// OpenTelemetry SDK's default SpanLimits.LinkCountLimit, beyond which the
// SDK drops links anyway (after their trace contexts were read for
// nothing). A Size 1024 batch therefore links its first 128 messages
// that carry a trace context and counts the others in
// orderly.batch.unlinked_count.
const DefaultMaxLinks = 128

// Attributes Orderly sets beyond the semantic conventions.
const (
	// AttemptKey is the message's Attempt (1 on first delivery), on the
	// span of a single-message call.
	AttemptKey = attribute.Key("orderly.attempt")
	// UnlinkedKey counts the messages of a batch that carried a trace
	// context but got no link because the batch had more than MaxLinks.
	UnlinkedKey = attribute.Key("orderly.batch.unlinked_count")
)

// Error types (the error.type attribute of a failed call's span): few and
// fixed, as the conventions ask.
const (
	ErrorPanic    = "panic"    // Do panicked (group.ErrPanic)
	ErrorBatch    = "batch"    // Do returned a group.BatchError naming items of the batch
	ErrorTimeout  = "timeout"  // the call ran past MsgTimeout (group.ErrTimeout), whatever Do returned
	ErrorRevoked  = "revoked"  // the partition was revoked and DrainTimeout passed (group.ErrRevoked), whatever Do returned bar a panic or a timeout
	ErrorShutdown = "shutdown" // Run gave up on in-flight work (group.ErrShutdown), whatever Do returned bar a panic or a timeout
	ErrorRejected = "rejected" // Do's error wraps group.ErrRejected (and is no BatchError naming items): the batch is halved to find the rejected message
	ErrorOther    = "_OTHER"   // any other error
)

// Option configures Trace.
type Option func(*config)

type config struct {
	prop     propagation.TextMapPropagator
	group    string
	maxLinks int
	linkOnly bool
}

// Propagator reads the messages' trace contexts with p instead of
// propagation.TraceContext{} (W3C traceparent and tracestate headers), e.g.
// a composite with B3 during a migration.
func Propagator(p propagation.TextMapPropagator) Option {
	return func(c *config) {
		if p != nil {
			c.prop = p
		}
	}
}

// ConsumerGroup sets messaging.consumer.group.name on every span: pass the
// group's Config.GroupID (the hook is not told it).
func ConsumerGroup(id string) Option { return func(c *config) { c.group = id } }

// MaxLinks caps the links of one span at n (default DefaultMaxLinks; 0:
// no links, and single-message spans are then roots, like batch spans).
// Raising it above the SDK's SpanLimits.LinkCountLimit needs that limit
// raised too.
func MaxLinks(n int) Option { return func(c *config) { c.maxLinks = max(n, 0) } }

// LinkOnly makes the span of a single-message call a root (or a child of
// the span Do's ctx already carries) that reaches the message's trace only
// through its link, as batch spans do: for services whose processing
// should not lengthen, or sit inside, the producer's trace.
func LinkOnly() Option { return func(c *config) { c.linkOnly = true } }

// Trace returns a group.Config.Trace hook that makes every Do call a span
// started by tp's tracer (nil: the global provider, otel.GetTracerProvider)
// and ended when Do returns.
//
// The span is of kind consumer, named "process <topic>" (semantic
// conventions: "{messaging.operation.name} {destination}"; "process" when
// the batch mixes topics), with messaging.system "kafka",
// messaging.operation.type and .name "process",
// messaging.consumer.group.name (see ConsumerGroup),
// messaging.destination.name and messaging.destination.partition.id when
// every message of the call shares them, and either, for one message,
// messaging.kafka.offset, messaging.message.body.size and orderly.attempt,
// or, for a batch, messaging.batch.message_count (the conventions ask not
// to set it on single-message spans).
//
// The span links to each message's creation context, as the conventions
// ask of a process span for every message it accounts for; a batch's
// links carry messaging.kafka.offset and messaging.destination.partition.id
// (and the topic, when the batch mixes topics), the per-message
// attributes the conventions put on links. Links are capped at MaxLinks.
//
// Parent: the ctx Do is given. When that carries no span and the call is
// one message with a trace context, the span is also a child of that
// context (OTEP 220 and the conventions allow the creation context as the
// parent of a single-message process span, in addition to the link, and
// not when there is an ambient span or a batch): the producer's trace
// then continues into Do and its own spans, which is what an operator
// following one record expects. A batch cannot have its messages' many
// traces as parents, so its span starts a trace of its own. LinkOnly
// turns the single-message parenting off.
//
// The ctx returned for Do carries the span: for one message, in that
// message's trace; for a batch, the span's own. A failed call (an error
// other than a group.BatchError, sole as group.AsBatchError reads it,
// naming nothing or, while ctx is not cancelled, only deferring items of
// the batch; or a panic, or nil past MsgTimeout, which group counts as a
// failed attempt) records the error as an exception
// event, sets error.type (ErrorPanic ... ErrorOther) and ends with status
// Error and the error's first line.
//
// The hook is called on Orderly's worker goroutines, concurrently; it
// keeps nothing of msgs past its own return (Orderly recycles them).
func Trace(tp trace.TracerProvider, opts ...Option) func(ctx context.Context, msgs []*group.Message) (context.Context, func(error)) {
	cfg := config{prop: propagation.TraceContext{}, maxLinks: DefaultMaxLinks}
	for _, o := range opts {
		o(&cfg)
	}
	if tp == nil {
		tp = gotel.GetTracerProvider()
	}
	_, w3c := cfg.prop.(propagation.TraceContext)
	h := &hook{
		cfg: cfg,
		w3c: w3c,
		t:   tp.Tracer(TracerName, trace.WithSchemaURL(semconv.SchemaURL)),
		base: []attribute.KeyValue{
			semconv.MessagingSystemKafka,
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingOperationName("process"),
		},
	}
	if cfg.group != "" {
		h.base = append(h.base, semconv.MessagingConsumerGroupName(cfg.group))
	}
	return h.start
}

type hook struct {
	cfg  config
	w3c  bool // cfg.prop is propagation.TraceContext: extractW3C reads it
	t    trace.Tracer
	base []attribute.KeyValue
}

func (h *hook) start(ctx context.Context, msgs []*group.Message) (context.Context, func(error)) {
	topic, part, sameTopic, samePart := common(msgs)
	attrs := make([]attribute.KeyValue, len(h.base), len(h.base)+5)
	copy(attrs, h.base)
	name := "process"
	if sameTopic {
		name = "process " + topic
		attrs = append(attrs, semconv.MessagingDestinationName(topic))
	}
	if samePart {
		attrs = append(attrs, semconv.MessagingDestinationPartitionID(strconv.Itoa(int(part))))
	}
	if len(msgs) == 1 {
		m := msgs[0]
		attrs = append(attrs, semconv.MessagingKafkaOffset(int(m.Offset)),
			semconv.MessagingMessageBodySize(len(m.Value)), AttemptKey.Int(m.Attempt))
	} else {
		attrs = append(attrs, semconv.MessagingBatchMessageCount(len(msgs)))
	}
	links, unlinked := h.links(msgs, sameTopic, samePart)
	if unlinked > 0 {
		attrs = append(attrs, UnlinkedKey.Int(unlinked))
	}
	parent := ctx
	if len(msgs) == 1 && len(links) == 1 && !h.cfg.linkOnly && !trace.SpanContextFromContext(ctx).IsValid() {
		parent = trace.ContextWithRemoteSpanContext(ctx, links[0].SpanContext)
	}
	ctx, span := h.t.Start(parent, name, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attrs...), trace.WithLinks(links...))
	return ctx, func(err error) { end(ctx, span, err, len(msgs)) }
}

// common reports the topic and partition of msgs and whether every
// message shares them.
func common(msgs []*group.Message) (topic string, part int32, sameTopic, samePart bool) {
	if len(msgs) == 0 {
		return "", 0, false, false
	}
	topic, part = msgs[0].Topic, msgs[0].Partition
	sameTopic, samePart = true, true
	for _, m := range msgs[1:] {
		if m.Topic != topic {
			return topic, part, false, false
		}
		samePart = samePart && m.Partition == part
	}
	return topic, part, sameTopic, samePart
}

// links reads the trace context of each message, up to maxLinks of them,
// and returns a link to each valid one and how many more had one.
func (h *hook) links(msgs []*group.Message, sameTopic, samePart bool) (links []trace.Link, unlinked int) {
	if h.cfg.maxLinks == 0 {
		return nil, 0
	}
	// Per-message attributes go on the links of a batch, all in one
	// backing array.
	per := 0
	if len(msgs) > 1 {
		per = 1
		if !samePart {
			per++
		}
		if !sameTopic {
			per++
		}
	}
	var attrs []attribute.KeyValue
	for _, m := range msgs {
		sc := h.extract(m)
		if !sc.IsValid() {
			continue
		}
		if len(links) == h.cfg.maxLinks {
			unlinked++
			continue
		}
		if links == nil {
			links = make([]trace.Link, 0, min(len(msgs), h.cfg.maxLinks))
			attrs = make([]attribute.KeyValue, 0, per*cap(links))
		}
		l := trace.Link{SpanContext: sc}
		if per > 0 {
			from := len(attrs)
			attrs = append(attrs, semconv.MessagingKafkaOffset(int(m.Offset)))
			if !samePart {
				attrs = append(attrs, semconv.MessagingDestinationPartitionID(strconv.Itoa(int(m.Partition))))
			}
			if !sameTopic {
				attrs = append(attrs, semconv.MessagingDestinationName(m.Topic))
			}
			l.Attributes = attrs[from:len(attrs):len(attrs)]
		}
		links = append(links, l)
	}
	return links, unlinked
}

// extract reads m's trace context with the propagator; the zero
// SpanContext when it has none. It extracts into a fresh context, so
// that a span Do's ctx carries is never taken for the message's.
func (h *hook) extract(m *group.Message) trace.SpanContext {
	switch {
	case len(m.Headers) == 0:
		return trace.SpanContext{}
	case h.w3c:
		return extractW3C(m.Headers)
	}
	c := carrier(m.Headers)
	return trace.SpanContextFromContext(h.cfg.prop.Extract(context.Background(), &c))
}

// end finishes the span of a call on n messages that returned err (ctx is
// Do's). A BatchError naming nothing, sole (group.AsBatchError), is a
// success, and so is one, sole, that only defers items of the batch
// (BatchError.OnlyDeferred: group counts the call in Stats.DeferredCalls)
// while ctx is live: a call whose ctx a revoke or shutdown cancelled has
// its verdicts ignored and its items handed back, and group counts it in
// Failures and Cancelled. A call past MsgTimeout failed
// whatever it returned, as group counts it, whether or not the watchdog
// (which looks every tenth of MsgTimeout) has cancelled ctx yet: its
// error is the pool's for it (merge.TimeoutError).
func end(ctx context.Context, span trace.Span, err error, n int) {
	deferred := false
	if err != nil {
		// An empty BatchError, sole (group.AsBatchError), is a success,
		// as group counts it.
		be, sole := group.AsBatchError(err)
		if sole && be.Len() == 0 {
			err = nil
		}
		deferred = sole && be.OnlyDeferred(n)
	}
	if merge.PastTimeout(ctx, group.ErrTimeout) {
		err = merge.TimeoutError(group.ErrTimeout, err)
	} else if deferred && ctx.Err() == nil {
		err = nil
	}
	if err != nil {
		span.RecordError(err)
		span.SetAttributes(semconv.ErrorTypeKey.String(errorType(ctx, err, n)))
		msg, _, _ := strings.Cut(err.Error(), "\n") // a panic's error carries its stack
		span.SetStatus(codes.Error, msg)
	}
	span.End()
}

// errorType is the error.type of a failed call on n messages.
func errorType(ctx context.Context, err error, n int) string {
	switch {
	case errors.Is(err, group.ErrTimeout): // whatever Do made of it, as group charges it
		return ErrorTimeout
	case errors.Is(err, group.ErrPanic):
		return ErrorPanic
	}
	// A revoke or shutdown that cancelled ctx decides what became of the
	// call whatever Do returned: group hands its items back and reads
	// no BatchError's verdicts.
	switch cause := context.Cause(ctx); {
	case cause == nil:
	case errors.Is(cause, group.ErrRevoked):
		return ErrorRevoked
	case errors.Is(cause, group.ErrShutdown):
		return ErrorShutdown
	}
	// A sole BatchError names what failed, as group reads it, when it
	// names an item of the batch; naming none, the batch failed as a whole.
	if be, sole := group.AsBatchError(err); sole && slices.ContainsFunc(be.Indexes(), func(i int) bool { return i >= 0 && i < n }) {
		return ErrorBatch
	}
	if errors.Is(err, group.ErrRejected) {
		return ErrorRejected
	}
	return ErrorOther
}

// carrier reads Kafka record headers for a propagator. Keys match
// regardless of case, as HTTP headers do (W3C names them in lower case).
type carrier []group.Header

func (c *carrier) Get(key string) string {
	for _, h := range *c {
		if len(h.Key) == len(key) && strings.EqualFold(string(h.Key), key) {
			return string(h.Value)
		}
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	for i, h := range *c {
		if strings.EqualFold(string(h.Key), key) {
			(*c)[i].Value = []byte(value)
			return
		}
	}
	*c = append(*c, group.Header{Key: []byte(key), Value: []byte(value)})
}

func (c *carrier) Keys() []string {
	keys := make([]string, len(*c))
	for i, h := range *c {
		keys[i] = string(h.Key)
	}
	return keys
}
