package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/internal/broker"
)

// TestConsumeHTTPBatch runs `orderly consume --http --size 10` (JSON
// batches) against an endpoint that answers the first request 401 and
// then 200 with per-item outcomes: v7 retry and v14 defer 300ms (the
// first time each comes), v21 reject. It checks the batch's JSON fields
// as the README documents them (a binary key as base64 with key_base64,
// headers, timestamp, attempt), the --header on every request, that the
// 401 spent no attempt and dead-lettered nothing, that the retry was
// charged and the deferral not (and waited), that v21 is on the
// dead-letter topic (--dead-letter-topic), that a named item's later records of its key in the
// batch came again while everything else was done once, per key in
// offset order, and the commit is at the high watermarks.
func TestConsumeHTTPBatch(t *testing.T) {
	t.Parallel()
	const n, keys = 60, 6
	b := newTopic(t, "batches", 2)
	produceKeyed(t, b, "batches", n, keys)
	binKey := "\xff\x00k"
	produceRecords(t, b, &sarama.ProducerMessage{Topic: "batches", Key: sarama.StringEncoder(binKey), Value: sarama.StringEncoder("vbin"),
		Headers: []sarama.RecordHeader{{Key: []byte("trace"), Value: []byte("abc")}}},
		&sarama.ProducerMessage{Topic: "batches", Value: sarama.StringEncoder("vnull")}) // no key: null
	named := map[string]bool{}
	ep := newEndpoint(t, 0, func(hs []hit) (int, http.Header, string) {
		if hs[0].n == 0 {
			return http.StatusUnauthorized, nil, "bad token"
		}
		var items []string
		for i, h := range hs {
			switch {
			case h.value == "v7" && !named["v7"]:
				items = append(items, fmt.Sprintf(`{"index": %d, "outcome": "retry", "error": "not yet"}`, i))
			case h.value == "v14" && !named["v14"]:
				items = append(items, fmt.Sprintf(`{"index": %d, "outcome": "defer", "delay_ms": 300}`, i))
			case h.value == "v21":
				items = append(items, fmt.Sprintf(`{"index": %d, "outcome": "reject", "error": "malformed"}`, i))
			default:
				continue
			}
			named[h.value] = true
		}
		return http.StatusOK, http.Header{"Content-Type": {"application/json"}}, `{"items": [` + strings.Join(items, ",") + `]}`
	})
	if err := b.CreateTopic("batches-dlq", 1); err != nil {
		t.Fatal(err)
	}
	p := startConsume(t, "--brokers", b.Addrs()[0], "--topic", "batches", "--group", "batcher",
		"--http", ep.url(), "--header", "Authorization: Bearer t0ken", "--size", "10", "--num", "2", "--ticker", "20ms",
		"--backoff", "300ms", "--max-backoff", "600ms", "--dead-letter-topic", "batches-dlq", "--progress", "off", "--log-level", "error")
	p.waitCommitted(b, "batcher", "batches")
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, p.output())
	}
	hits := ep.snapshot()

	// The model of what the group does with the outcomes: a named record
	// holds its key, so its key's later records in the batch come again.
	done := map[string]int{}
	lastOff := map[string]int64{}
	var first401 []hit
	seen := map[string][]hit{} // by value: each delivery
	for i := 0; i < len(hits); {
		j := i
		for j < len(hits) && hits[j].n == hits[i].n {
			j++
		}
		req := hits[i:j]
		i = j
		if req[0].status == http.StatusUnauthorized {
			first401 = req
			continue
		}
		held := map[string]bool{}
		for _, h := range req {
			seen[h.value] = append(seen[h.value], h)
			if h.auth != "Bearer t0ken" {
				t.Errorf("request %d: Authorization %q, want the --header's", h.n, h.auth)
			}
			if held[h.key] {
				continue
			}
			isNamed := h.value == "v21" || h.value == "v7" && len(seen["v7"]) == 1 || h.value == "v14" && len(seen["v14"]) == 1
			if isNamed {
				held[h.key] = true
				continue
			}
			if prev, ok := lastOff[h.key]; ok && h.offset <= prev {
				t.Errorf("key %q: offset %d done after %d, want offset order", h.key, h.offset, prev)
			}
			lastOff[h.key] = h.offset
			done[h.value]++
		}
	}
	if len(first401) == 0 {
		t.Fatalf("no 401 answered; hits %+v", hits)
	}
	for _, h := range hits {
		if d := h.at.Sub(first401[0].at); d > 100*time.Millisecond && d < 280*time.Millisecond {
			t.Errorf("request %d came %v after the 401, want none 0.1-0.28s after it: an endpoint error pauses all requests for the backoff (--backoff 300ms)", h.n, d)
		}
	}
	for _, h := range first401 {
		if again := seen[h.value]; len(again) == 0 || again[0].attempt != 1 {
			t.Errorf("%s after the 401: deliveries %+v, want it again at attempt 1 (an endpoint error spends none)", h.value, again)
		}
	}
	for v, k := range done {
		if k != 1 || v == "v21" {
			t.Errorf("%s done %d times, want once (v21: never)", v, k)
		}
	}
	if len(done) != n+1 {
		t.Errorf("got %d records done, want %d (all but v21, and vbin and vnull)", len(done), n+1)
	}
	if s := seen["v7"]; len(s) < 2 || s[0].attempt != 1 || s[len(s)-1].attempt != 2 {
		t.Errorf("v7 deliveries %+v, want attempt 1 (named retry) then attempt 2", s)
	}
	if s := seen["v14"]; len(s) < 2 || s[len(s)-1].attempt != 1 || s[1].at.Sub(s[0].at) < 290*time.Millisecond {
		t.Errorf("v14 deliveries %+v, want it again at attempt 1 (a deferral is not charged) at least 300ms later", s)
	}
	dead := jsonLines[entryJSON](t, dlqRun(t, "list", "--brokers", b.Addrs()[0], "--topic", "batches-dlq", "--json"))
	if len(dead) != 1 || dead[0].Reason != "rejected" || !strings.Contains(dead[0].Error, "malformed") ||
		seen["v21"] == nil || dead[0].Offset != seen["v21"][0].offset {
		t.Errorf("dead letters %+v, want v21 alone, reason rejected, error naming malformed", dead)
	}
	checkBatchJSON(t, ep, binKey)
	wantFigures(t, finalFigures(t, p.stdout.String()), map[string]float64{
		"committed": n + 2, "endpoint errors": 1, "items named retry or defer": 2, "items named reject": 1,
		"dead-lettered": 1, "rejected": 1, "failed calls": 0, "retries": 1,
	})
	if committed, hw := b.Committed("batcher", "batches"), b.HighWatermarks("batches"); fmt.Sprint(committed) != fmt.Sprint(hw) {
		t.Errorf("committed %v, want the high watermarks %v", committed, hw)
	}
}

// checkBatchJSON reads the request bodies as plain JSON: an array of
// objects with exactly the documented fields; the binary key base64 with
// key_base64 true, text values as text, headers as key/value objects.
func checkBatchJSON(t *testing.T, ep *endpoint, binKey string) {
	t.Helper()
	ep.mu.Lock()
	bodies := slices.Clone(ep.bodies)
	ep.mu.Unlock()
	fields := []string{"attempt", "headers", "key", "key_base64", "offset", "partition", "timestamp", "topic", "value", "value_base64"}
	foundBin := false
	for _, body := range bodies {
		var recs []map[string]any
		if err := json.Unmarshal(body, &recs); err != nil {
			t.Fatalf("request body %q: %v", body, err)
		}
		for _, r := range recs {
			var got []string
			for k := range r {
				got = append(got, k)
			}
			slices.Sort(got)
			if !slices.Equal(got, fields) {
				t.Fatalf("record fields %v, want %v", got, fields)
			}
			if ts, _ := r["timestamp"].(string); len(ts) != len("2006-01-02T15:04:05.000Z") {
				t.Errorf("timestamp %q, want RFC 3339 with milliseconds in UTC", ts)
			}
			if r["value"] == "vnull" {
				if r["key"] != nil || r["key_base64"] != false {
					t.Errorf("record without a key %v: want key null", r)
				}
				continue
			}
			if r["value"] != "vbin" {
				if r["key_base64"] != false || r["value_base64"] != false {
					t.Errorf("text record %v: want key_base64 and value_base64 false", r)
				}
				continue
			}
			foundBin = true
			want := base64.StdEncoding.EncodeToString([]byte(binKey))
			hdrs, _ := r["headers"].([]any)
			if r["key"] != want || r["key_base64"] != true || len(hdrs) != 1 ||
				fmt.Sprint(hdrs[0]) != "map[key:trace value:abc]" {
				t.Errorf("binary-key record %v: want key %q with key_base64 true, headers [{trace abc}]", r, want)
			}
		}
	}
	if !foundBin {
		t.Errorf("the binary-key record was never sent")
	}
}

// The run of TestConsumeHTTPRejectedBatch and TestConsumeExecRejectedBatch:
// rejN records over rejKeys keys in one partition, handed out in batches
// of 10 to a sink that rejects every call holding rejBad, with a backoff
// longer than finding it should take.
const (
	rejN, rejKeys = 40, 20
	rejBad        = "v13"
	rejBackoff    = 5 * time.Second
)

// sinkCall is one call an endpoint or command received, as the test's
// ledger holds it: its records in the order sent, whether the sink
// rejected it, and when it came.
type sinkCall struct {
	recs     []hit
	rejected bool
	at       time.Time
}

// runRejectedBatch produces the rejected-batch run's records to topic,
// runs consume with sink (the --http or --exec flag and its value, and
// where dead letters go) until it has committed them all, stops it and
// returns its final figures.
func runRejectedBatch(t *testing.T, b *broker.Broker, topic string, sink ...string) map[string]float64 {
	t.Helper()
	produceKeyed(t, b, topic, rejN, rejKeys)
	p := startConsume(t, append([]string{"--brokers", b.Addrs()[0], "--topic", topic, "--group", topic,
		"--size", "10", "--num", "2", "--ticker", "500ms", "--backoff", rejBackoff.String(), "--max-backoff", rejBackoff.String(),
		"--progress", "off", "--log-level", "warn"}, sink...)...)
	p.waitCommitted(b, topic, topic)
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, p.output())
	}
	return finalFigures(t, p.stdout.String())
}

// checkRejectedAlone checks a rejected-batch run: the first rejected call
// was a batch over several keys; the calls on its halves came at once
// (within the backoff) and the last rejected call held rejBad alone; every
// other record was done exactly once, per key in offset order; no
// delivery was charged an attempt; rejBad alone is dead-lettered (reason
// rejected, its error naming wantErr); and the final line counts what the
// sink saw.
func checkRejectedAlone(t *testing.T, calls []sinkCall, letters []entryJSON, fig map[string]float64, wantErr string) {
	t.Helper()
	defer func() {
		if t.Failed() {
			for i, c := range calls {
				var vs []string
				for _, h := range c.recs {
					vs = append(vs, fmt.Sprintf("%s@%d/%d#%d", h.value, h.partition, h.offset, h.attempt))
				}
				t.Logf("call %d rejected %v: %v", i, c.rejected, vs)
			}
		}
	}()
	var first, last *sinkCall
	var bad coord
	rejected := 0
	done := map[coord]int{}
	lastOff := map[string]int64{}
	for i, c := range calls {
		for _, h := range c.recs {
			if h.attempt != 1 {
				t.Errorf("call %d: %s sent at attempt %d, want 1: halving a rejected batch charges no attempt", i, h.value, h.attempt)
			}
			if h.value == rejBad {
				bad = h.coord()
			}
		}
		if c.rejected {
			rejected++
			if first == nil {
				first = &calls[i]
			}
			last = &calls[i]
			continue
		}
		for _, h := range c.recs {
			if prev, ok := lastOff[h.key]; ok && h.offset <= prev {
				t.Errorf("key %s: offset %d done after offset %d, want offset order", h.key, h.offset, prev)
			}
			lastOff[h.key] = h.offset
			done[h.coord()]++
		}
	}
	if first == nil {
		t.Fatalf("no call was rejected: %s never reached the sink", rejBad)
	}
	keys := map[string]bool{}
	for _, h := range first.recs {
		keys[h.key] = true
	}
	if len(keys) < 2 {
		t.Fatalf("the first rejected call held %d records over %d keys, want a batch over several keys (the run tests nothing)", len(first.recs), len(keys))
	}
	if len(last.recs) != 1 || last.recs[0].value != rejBad {
		t.Errorf("the last rejected call held %d records, want %s alone", len(last.recs), rejBad)
	}
	if d := last.at.Sub(first.at); d >= rejBackoff {
		t.Errorf("%s came alone %v after its batch was rejected, want less than the backoff (%v): the group halves at once", rejBad, d, rejBackoff)
	}
	for at, k := range done {
		if k != 1 || at == bad {
			t.Errorf("%v done %d times, want once (%s: never)", at, k, rejBad)
		}
	}
	if len(done) != rejN-1 {
		t.Errorf("got %d records done, want %d: all but %s", len(done), rejN-1, rejBad)
	}
	if len(letters) != 1 {
		t.Errorf("got %d dead letters, want 1: %s alone", len(letters), rejBad)
	}
	for _, d := range letters {
		if (coord{d.Topic, d.Partition, d.Offset}) != bad || d.Reason != "rejected" || d.Attempts != 1 || !strings.Contains(d.Error, wantErr) {
			t.Errorf("dead letter %s/%d@%d reason %s attempts %d error %q, want %s (%v), reason rejected, attempts 1, error naming %q",
				d.Topic, d.Partition, d.Offset, d.Reason, d.Attempts, d.Error, rejBad, bad, wantErr)
		}
	}
	wantFigures(t, fig, map[string]float64{"handled": rejN - 1, "committed": rejN, "dead-lettered": 1, "rejected": 1,
		"rejected calls": float64(rejected), "retries": 0, "failed calls": 0})
	if fig["split calls"] < 2 {
		t.Errorf("final line: split calls %v, want at least 2 (the halves of the rejected batch)", fig["split calls"])
	}
}

// TestConsumeHTTPRejectedBatch: an endpoint answering 400 to every JSON
// batch that holds one bad record dead-letters that record alone, on the
// dead-letter topic, and every batch mate is done. A rejected batch used
// to dead-letter the first record of each of its keys: got 5 dead
// letters, want 1.
func TestConsumeHTTPRejectedBatch(t *testing.T) {
	t.Parallel()
	const topic = "rejected-batch"
	b := newTopic(t, topic, 1)
	if err := b.CreateTopic(topic+"-dlq", 1); err != nil {
		t.Fatal(err)
	}
	ep := newEndpoint(t, 0, func(hs []hit) (int, http.Header, string) {
		for _, h := range hs {
			if h.value == rejBad {
				return http.StatusBadRequest, nil, "bad record " + rejBad
			}
		}
		return http.StatusOK, nil, ""
	})
	fig := runRejectedBatch(t, b, topic, "--http", ep.url(), "--dead-letter-topic", topic+"-dlq")
	ep.mu.Lock()
	if len(ep.concurrent) > 0 {
		t.Errorf("keys with two requests in flight at once: %v", ep.concurrent)
	}
	ep.mu.Unlock()
	var calls []sinkCall
	for _, h := range ep.snapshot() {
		if len(calls) == 0 || calls[len(calls)-1].recs[0].n != h.n {
			calls = append(calls, sinkCall{rejected: h.status == http.StatusBadRequest, at: h.at})
		}
		c := &calls[len(calls)-1]
		c.recs = append(c.recs, h)
	}
	letters := jsonLines[entryJSON](t, dlqRun(t, "list", "--brokers", b.Addrs()[0], "--topic", topic+"-dlq", "--json"))
	checkRejectedAlone(t, calls, letters, fig, "HTTP 400 Bad Request: bad record "+rejBad)
}

// TestConsumeRejectedDuringOutage: the endpoint answers 500 to every call
// for its first 2s, which starts an outage (the group then runs one probe
// call at a time and splits no plain failure); from then on it answers
// 400 to every batch holding v3 and 200 to the rest. The probe batch holds
// v3, so a rejection that failed like a 500 kept the outage on for good:
// the same 40-record batch came every probe delay, answered 400, and
// nothing was committed. A rejected batch is halved during an outage too,
// the halves without v3 are done and end the outage, and v3 alone is
// dead-lettered.
func TestConsumeRejectedDuringOutage(t *testing.T) {
	t.Parallel()
	const topic, n, keys, bad = "rejected-outage", 40, 8, "v3"
	b := newTopic(t, topic, 1)
	produceKeyed(t, b, topic, n, keys)
	var mu sync.Mutex
	var start time.Time
	ep := newEndpoint(t, 0, func(hs []hit) (int, http.Header, string) {
		mu.Lock()
		if start.IsZero() {
			start = time.Now()
		}
		down := time.Since(start) < 2*time.Second
		mu.Unlock()
		if down {
			return http.StatusInternalServerError, nil, "down"
		}
		for _, h := range hs {
			if h.value == bad {
				return http.StatusBadRequest, nil, "bad record " + bad
			}
		}
		return http.StatusOK, nil, ""
	})
	data := t.TempDir()
	p := startConsume(t, "--brokers", b.Addrs()[0], "--topic", topic, "--group", topic,
		"--size", "64", "--num", "2", "--ticker", "200ms", "--backoff", "200ms", "--max-backoff", "1s",
		"--progress", "off", "--log-level", "warn", "--data", data, "--http", ep.url())
	p.waitFor(30*time.Second, "the commit to reach the high watermark", func() bool { return b.CaughtUp(topic, topic) })
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, p.output())
	}
	fig := finalFigures(t, p.stdout.String())
	if fig["outages"] < 1 {
		t.Fatalf("final line: outages %v, want at least 1 (the run tests nothing)\n%s", fig["outages"], p.stdout.String())
	}
	wantFigures(t, fig, map[string]float64{"handled": n - 1, "committed": n, "dead-lettered": 1, "rejected": 1})
	done := map[int64]int{}
	for _, h := range ep.snapshot() {
		if h.status == http.StatusOK {
			done[h.offset]++
		}
	}
	if len(done) != n-1 {
		t.Errorf("got %d records done, want %d: all but %s", len(done), n-1, bad)
	}
	letters := jsonLines[entryJSON](t, dlqRun(t, "list", "--data", data, "--json"))
	if len(letters) != 1 || letters[0].Reason != "rejected" || !strings.Contains(letters[0].Error, "bad record "+bad) {
		t.Errorf("dead letters: got %+v, want one, %s, reason rejected", letters, bad)
	}
}
