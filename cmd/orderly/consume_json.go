package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/orderly-go/orderly/group"
)

// recordJSON is one record as --http batches and --exec lines carry it,
// in the shape `orderly dlq show --json` uses: key, value and header
// values are UTF-8 text when they are valid UTF-8, else base64 with the
// matching *_base64 field true; a missing key or value (a tombstone) is
// null.
type recordJSON struct {
	Topic       string       `json:"topic"`
	Partition   int32        `json:"partition"`
	Offset      int64        `json:"offset"`
	Key         *string      `json:"key"`
	KeyBase64   bool         `json:"key_base64"`
	Value       *string      `json:"value"`
	ValueBase64 bool         `json:"value_base64"`
	Headers     []headerJSON `json:"headers"`
	Timestamp   string       `json:"timestamp"`
	Attempt     int          `json:"attempt"`
}

// timestampFormat is RFC 3339 with milliseconds, Kafka's precision.
const timestampFormat = "2006-01-02T15:04:05.000Z07:00"

func toJSON(m *group.Message) recordJSON {
	r := recordJSON{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Attempt: m.Attempt,
		Headers: headersJSON(m.Headers)}
	r.Key, r.KeyBase64 = text(m.Key)
	r.Value, r.ValueBase64 = text(m.Value)
	if !m.Timestamp.IsZero() {
		r.Timestamp = m.Timestamp.UTC().Format(timestampFormat)
	}
	return r
}

// headersJSON are a record's headers as the JSON forms carry them.
func headersJSON(hs []group.Header) []headerJSON {
	out := make([]headerJSON, 0, len(hs))
	for _, h := range hs {
		hj := headerJSON{Key: string(h.Key)}
		hj.Value, hj.ValueBase64 = text(h.Value)
		out = append(out, hj)
	}
	return out
}

// asciiJSON is v as JSON with every character above ASCII, and DEL,
// escaped (\uXXXX), so that it can travel as an HTTP header value: Go's
// client refuses DEL in one (json.Marshal escapes the other control
// characters), and servers that read header bytes as Latin-1 see the same
// text.
func asciiJSON(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	for _, r := range string(b) {
		switch {
		case r < utf8.RuneSelf && r != 0x7f:
			sb.WriteRune(r)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&sb, "\\u%04x\\u%04x", r1, r2)
		default:
			fmt.Fprintf(&sb, "\\u%04x", r)
		}
	}
	return sb.String(), nil
}

// appendBatchJSON appends the batch as a JSON array.
func appendBatchJSON(dst *bytes.Buffer, batch []*group.Message) error {
	recs := make([]recordJSON, len(batch))
	for i, m := range batch {
		recs[i] = toJSON(m)
	}
	return json.NewEncoder(dst).Encode(recs)
}

// appendLinesJSON appends the batch as JSON lines.
func appendLinesJSON(dst *bytes.Buffer, batch []*group.Message) error {
	enc := json.NewEncoder(dst)
	for _, m := range batch {
		if err := enc.Encode(toJSON(m)); err != nil {
			return err
		}
	}
	return nil
}

// outcomeJSON is what an endpoint or a command may say about one item of
// its batch: index is its position in the batch (0-based), outcome one of
// done, retry, defer, reject; error is kept with a retried or rejected
// item; delay_ms is a deferral's delay.
type outcomeJSON struct {
	Index   *int   `json:"index"`
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
	DelayMS *int64 `json:"delay_ms,omitempty"`
}

// errBadOutcome is wrapped by errors about an outcome an endpoint or
// command named that cannot be applied.
var errBadOutcome = errors.New("bad per-item outcome")

// applyOutcomes turns named outcomes into a BatchError for a batch (nil
// when every item is done). defDelay is a deferral's delay when none is
// given. src names who said it, for errors.
func applyOutcomes(batch []*group.Message, outs []outcomeJSON, defDelay time.Duration, src string, ctr *sinkCounters) error {
	var be group.BatchError
	seen := make(map[int]bool, len(outs))
	for _, o := range outs {
		if o.Index == nil || *o.Index < 0 || *o.Index >= len(batch) {
			idx := "none"
			if o.Index != nil {
				idx = fmt.Sprint(*o.Index)
			}
			return fmt.Errorf("%s: %w: index %s outside the batch of %d", src, errBadOutcome, idx, len(batch))
		}
		i := *o.Index
		if seen[i] {
			return fmt.Errorf("%s: %w: index %d named twice", src, errBadOutcome, i)
		}
		seen[i] = true
		m := batch[i]
		why := o.Error
		if why == "" {
			why = "no error given"
		}
		switch o.Outcome {
		case "done", "":
		case "retry":
			ctr.itemRetry.Add(1)
			be.Fail(i, itemErr(m, fmt.Errorf("%s said retry: %s", src, why)))
		case "defer":
			d := defDelay
			if o.DelayMS != nil {
				if *o.DelayMS < 0 {
					return fmt.Errorf("%s: %w: index %d: delay_ms %d is negative", src, errBadOutcome, i, *o.DelayMS)
				}
				d = time.Duration(*o.DelayMS) * time.Millisecond
			}
			ctr.itemRetry.Add(1)
			be.Defer(i, d)
		case "reject":
			ctr.itemRej.Add(1)
			be.DeadLetter(i, itemErr(m, fmt.Errorf("%s rejected it: %s", src, why)))
		default:
			return fmt.Errorf("%s: %w: index %d: outcome %q (want done, retry, defer or reject)", src, errBadOutcome, i, o.Outcome)
		}
	}
	return be.Err()
}
