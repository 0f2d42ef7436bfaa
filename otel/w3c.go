package otel

import (
	"bytes"

	"go.opentelemetry.io/otel/trace"

	"github.com/orderly-go/orderly/group"
)

// With the default propagator, propagation.TraceContext{}, the hook reads
// the traceparent header itself, straight from the record's header bytes:
// the propagator's Extract needs a carrier (the header's value as a new
// string) and puts its result in a new context, about 0.8µs and four
// allocations per record, most of a batch span's cost. extractW3C follows
// TraceContext.extract of go.opentelemetry.io/otel v1.47.0 rule for rule
// (FuzzExtractW3C checks that both agree on every input).

const maxW3CVersion = 254

// extractW3C reads the W3C trace context of a record's headers; the zero
// SpanContext when there is none or it is malformed.
func extractW3C(headers []group.Header) trace.SpanContext {
	h := header(headers, "traceparent")
	if len(h) == 0 {
		return trace.SpanContext{}
	}
	var ver [1]byte
	if !hexPart(ver[:], &h, 2) || ver[0] > maxW3CVersion {
		return trace.SpanContext{}
	}
	var scc trace.SpanContextConfig
	var flags [1]byte
	if !hexPart(scc.TraceID[:], &h, 32) || !hexPart(scc.SpanID[:], &h, 16) || !hexPart(flags[:], &h, 2) {
		return trace.SpanContext{}
	}
	if ver[0] == 0 && (len(h) != 0 || flags[0] > 3) {
		return trace.SpanContext{} // version 0 has no more fields and no other flags
	}
	scc.TraceFlags = trace.TraceFlags(flags[0]) & (trace.FlagsSampled | trace.FlagsRandom)
	if ts := header(headers, "tracestate"); len(ts) > 0 {
		// A malformed tracestate does not void the traceparent (W3C).
		scc.TraceState, _ = trace.ParseTraceState(string(ts))
	}
	scc.Remote = true
	sc := trace.NewSpanContext(scc)
	if !sc.IsValid() {
		return trace.SpanContext{}
	}
	return sc
}

// header is the value of the first header named key, in any case (as
// the carrier's Get), or nil.
func header(headers []group.Header, key string) []byte {
	for _, h := range headers {
		if len(h.Key) == len(key) && bytes.EqualFold(h.Key, []byte(key)) {
			return h.Value
		}
	}
	return nil
}

// hexPart decodes the lower-case hex field before the next '-' of *h into
// dst, which it must fill exactly (n hex digits), and moves *h past it.
func hexPart(dst []byte, h *[]byte, n int) bool {
	part, left, _ := bytes.Cut(*h, []byte{'-'})
	*h = left
	if len(part) != n {
		return false
	}
	bad := byte(0)
	for i := 0; i < n; i += 2 {
		hi, lo := unhex[part[i]], unhex[part[i+1]]
		dst[i/2] = hi<<4 | lo
		bad |= hi | lo
	}
	return bad&0xf0 == 0 // every invalid digit maps to 0xff
}

// unhex maps the lower-case hex digits to their value, every other byte
// (upper-case A-F included: W3C does not allow them) to 0xff.
var unhex = func() (t [256]byte) {
	for c := range t {
		switch {
		case '0' <= c && c <= '9':
			t[c] = byte(c - '0')
		case 'a' <= c && c <= 'f':
			t[c] = byte(c - 'a' + 10)
		default:
			t[c] = 0xff
		}
	}
	return t
}()
