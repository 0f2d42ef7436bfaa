package otel

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/broker"
)

// produceTraced writes n records "m<i>" to topic over keys keys, each
// carrying scs[i] in W3C headers when it is valid, and a few a malformed
// traceparent instead (every 37th).
func produceTraced(t *testing.T, addrs []string, topic string, n, keys int, scs []trace.SpanContext) {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_0_0_0
	cfg.Producer.Return.Successes = true
	p, err := sarama.NewSyncProducer(addrs, cfg)
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	defer p.Close()
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		m := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(fmt.Sprintf("k%d", i%keys)), Value: sarama.StringEncoder(fmt.Sprintf("m%d", i))}
		switch {
		case i%37 == 36:
			m.Headers = []sarama.RecordHeader{{Key: []byte("traceparent"), Value: []byte("00-not-a-trace-01")}}
		case scs[i].IsValid():
			for _, h := range traceHeaders(scs[i]) {
				m.Headers = append(m.Headers, sarama.RecordHeader{Key: h.Key, Value: h.Value})
			}
		}
		msgs[i] = m
	}
	if err := p.SendMessages(msgs); err != nil {
		t.Fatalf("produce %d records to %s: %v", n, topic, err)
	}
}

// doCall is what one Do call saw.
type doCall struct {
	span   trace.SpanContext // from Do's ctx
	msgs   []int             // record numbers, in batch order
	offset []int64
	failed string // the error type Do caused, "" for none
}

// TestSpansOfARealGroup: a group on kfake consumes records that carry
// W3C trace contexts (some none, some malformed), with calls that fail
// as a whole (split, then retried), one that panics and retries. Every
// Do call has exactly one span, the ctx Do sees carries it, each span
// links to exactly its messages' contexts (a single-message one is also
// their child, unless LinkOnly), and failed calls end with status Error.
func TestSpansOfARealGroup(t *testing.T) {
	tests := []struct {
		name     string
		size     int
		linkOnly bool
	}{
		{"batches", 16, false},
		{"single messages", 1, false},
		{"single messages, LinkOnly", 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const n, topic, groupID = 300, "orders", "ledger"
			b, err := broker.Start(broker.Config{Topics: []string{topic}, Partitions: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			scs := spanContexts(7, n)
			for i := range scs {
				if i%11 == 10 {
					scs[i] = trace.SpanContext{} // no trace context
				}
			}
			produceTraced(t, b.Addrs(), topic, n, 10, scs)

			tp, sr := recorder(t)
			opts := []Option{ConsumerGroup(groupID)}
			if tt.linkOnly {
				opts = append(opts, LinkOnly())
			}
			var mu sync.Mutex
			var calls []doCall
			sc := group.DefaultSarama()
			sc.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
			g, err := group.New(group.Config{
				Brokers: b.Addrs(), Topics: []string{topic}, GroupID: groupID, Sarama: sc,
				Size: tt.size, Num: 4, Ticker: 5 * time.Millisecond,
				Retry:  group.Retry{Backoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond},
				Trace:  Trace(tp, opts...),
				Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
			}, group.Handler[*group.Message]{Do: func(ctx context.Context, batch []*group.Message) error {
				c := doCall{span: trace.SpanContextFromContext(ctx)}
				var fail, panics bool
				for _, m := range batch {
					i, err := strconv.Atoi(strings.TrimPrefix(string(m.Value), "m"))
					if err != nil {
						t.Errorf("record %q: %v", m.Value, err)
					}
					c.msgs, c.offset = append(c.msgs, i), append(c.offset, m.Offset)
					fail = fail || (i%50 == 3 && m.Attempt == 1)
					panics = panics || (i == 77 && m.Attempt == 1)
				}
				switch {
				case panics:
					c.failed = ErrorPanic
				case fail:
					c.failed = ErrorOther
				}
				mu.Lock()
				calls = append(calls, c)
				mu.Unlock()
				if panics {
					panic("record 77 panics once")
				}
				if fail {
					return errors.New("first attempt fails")
				}
				return nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := b.WaitCaughtUp(ctx, groupID, topic, g.Run); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			checkSpans(t, sr.Ended(), calls, scs, tt.linkOnly, topic, groupID)
		})
	}
}

// checkSpans matches the recorded spans with the Do calls one to one.
func checkSpans(t *testing.T, spans []sdktrace.ReadOnlySpan, calls []doCall, scs []trace.SpanContext, linkOnly bool, topic, groupID string) {
	t.Helper()
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
	}
	if len(spans) != len(calls) || len(byID) != len(spans) {
		t.Fatalf("got %d spans (%d distinct) for %d Do calls, want one each", len(spans), len(byID), len(calls))
	}
	failed, singles := 0, 0
	for _, c := range calls {
		s, ok := byID[c.span.SpanID()]
		if !ok || !sameContext(s.SpanContext(), c.span) {
			t.Fatalf("Do's ctx carries span %v of trace %v: no such span recorded", c.span.SpanID(), c.span.TraceID())
		}
		delete(byID, c.span.SpanID()) // each span once
		var want []trace.SpanContext
		for _, i := range c.msgs {
			if i%37 != 36 && scs[i].IsValid() {
				want = append(want, scs[i])
			}
		}
		links := s.Links()
		if len(links) != len(want) {
			t.Fatalf("span of records %v: got %d links, want %d (one per record with a trace context)", c.msgs, len(links), len(want))
		}
		for k, l := range links {
			if !sameContext(l.SpanContext, want[k]) {
				t.Fatalf("span of records %v: link %d goes to trace %v, want %v", c.msgs, k, l.SpanContext.TraceID(), want[k].TraceID())
			}
		}
		if s.Name() != "process "+topic || s.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("span: got %q kind %v, want %q consumer", s.Name(), s.SpanKind(), "process "+topic)
		}
		if v, _ := attr(s.Attributes(), "messaging.consumer.group.name"); v.AsString() != groupID {
			t.Errorf("messaging.consumer.group.name: got %q, want %q", v.AsString(), groupID)
		}
		typ, _ := attr(s.Attributes(), "error.type")
		switch {
		case c.failed != "" && (s.Status().Code != codes.Error || typ.AsString() != c.failed):
			t.Errorf("span of failed records %v: got status %v, error.type %q; want Error, %q", c.msgs, s.Status(), typ.AsString(), c.failed)
		case c.failed == "" && s.Status().Code != codes.Unset:
			t.Errorf("span of records %v that succeeded: got status %v, want Unset", c.msgs, s.Status())
		}
		if c.failed != "" {
			failed++
		}
		wantParent := trace.SpanContext{}
		if len(c.msgs) == 1 {
			singles++
			if off, _ := attr(s.Attributes(), "messaging.kafka.offset"); off.AsInt64() != c.offset[0] {
				t.Errorf("span of record %d: messaging.kafka.offset %d, want %d", c.msgs[0], off.AsInt64(), c.offset[0])
			}
			if !linkOnly && len(want) == 1 {
				wantParent = want[0]
			}
		}
		if p := s.Parent(); !sameContext(p, wantParent) {
			t.Errorf("span of records %v: parent %v/%v, want %v/%v", c.msgs, p.TraceID(), p.SpanID(), wantParent.TraceID(), wantParent.SpanID())
		}
		if wantParent.IsValid() && c.span.TraceID() != wantParent.TraceID() {
			t.Errorf("Do's ctx for record %d: trace %v, want the record's %v", c.msgs[0], c.span.TraceID(), wantParent.TraceID())
		}
	}
	if failed < 6 || singles == 0 {
		t.Errorf("got %d failed calls and %d single-message ones: the scenario did not fail enough", failed, singles)
	}
}
