package main

import (
	"maps"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// TestConsumeHTTP runs `orderly consume --http --size 1` against an
// endpoint that answers 500 to the first 30 requests, 429 with
// Retry-After: 1 to the 31st, and 400 to one record, always. It checks
// at the endpoint that every other record was answered 2xx exactly once,
// per key in offset order and never two at once; that after the 429 no
// request arrived for the second it asked for and that the throttled
// record came back at the same attempt (no attempt spent); that the 400
// record is in the local dead-letter store with reason rejected; that the
// final line counts the 500s, the 429, the rejection and the attempts the
// endpoint saw; and, on the broker, that the commit is at the high
// watermarks.
func TestConsumeHTTP(t *testing.T) {
	t.Parallel()
	const (
		n, keys   = 401, 20 // and one more with a binary key
		failFirst = 30
		rejected  = "v123"
	)
	b := newTopic(t, "orders", 4)
	produceKeyed(t, b, "orders", n-1, keys)
	binKey := "\xff\x00k"
	produceRecords(t, b, &sarama.ProducerMessage{Topic: "orders", Key: sarama.StringEncoder(binKey), Value: sarama.StringEncoder("vbin")})
	var throttledAt time.Time
	var throttled coord
	ep := newEndpoint(t, 2*time.Millisecond, func(hs []hit) (int, http.Header, string) {
		h := hs[0]
		switch {
		case h.n < failFirst:
			return http.StatusInternalServerError, nil, "database down"
		case h.n == failFirst:
			throttledAt, throttled = h.at, h.coord()
			return http.StatusTooManyRequests, http.Header{"Retry-After": {"1"}}, ""
		case h.value == rejected:
			return http.StatusBadRequest, nil, "amount must be positive"
		}
		return http.StatusOK, nil, "ok"
	})
	data := t.TempDir()
	p := startConsume(t, "--brokers", b.Addrs()[0], "--topic", "orders", "--group", "hooks",
		"--http", ep.url(), "--size", "1", "--num", "8", "--backoff", "50ms", "--max-backoff", "200ms",
		"--data", data, "--progress", "off", "--log-level", "warn")
	p.waitCommitted(b, "hooks", "orders")
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, p.output())
	}

	hits := ep.snapshot()
	checkKeyOrder(t, ep, hits)
	ok := map[coord]int{}
	final := map[coord]hit{} // each record's last request
	var rejectedAt *hit
	status := map[int]int{}
	for _, h := range hits {
		if h.value == "vbin" && (h.key != binKey || !h.keyBase64) {
			t.Errorf("binary key: got %q (base64 %v), want %q sent as base64 with Kafka-Key-Encoding", h.key, h.keyBase64, binKey)
		}
		status[h.status]++
		final[h.coord()] = h
		if h.status == http.StatusOK {
			ok[h.coord()]++
		}
		if h.status == http.StatusBadRequest {
			rejectedAt = &h
		}
	}
	if len(final) != n {
		t.Errorf("got %d distinct records at the endpoint, want %d", len(final), n)
	}
	for c, k := range ok {
		if k != 1 {
			t.Errorf("%v answered 200 %d times, want once (a graceful run repeats nothing)", c, k)
		}
	}
	if len(ok) != n-1 || rejectedAt == nil || status[http.StatusBadRequest] != 1 {
		t.Fatalf("got %d records answered 200 and %d answered 400 (statuses %v), want %d and 1 (%s)", len(ok), status[http.StatusBadRequest], status, n-1, rejected)
	}
	if status[http.StatusInternalServerError] != failFirst || status[http.StatusTooManyRequests] != 1 {
		t.Errorf("statuses answered %v, want %d x 500 and 1 x 429", status, failFirst)
	}

	// The 429 paused every request for its Retry-After (1s): none arrived
	// from 300ms after it (requests already sent may land just after) to
	// just before the second was up, and the throttled record was sent
	// again at the same attempt.
	var during []hit
	var again *hit
	for _, h := range hits {
		if d := h.at.Sub(throttledAt); d > 300*time.Millisecond && d < 950*time.Millisecond {
			during = append(during, h)
		}
		if h.coord() == throttled && h.n > failFirst && again == nil {
			again = &h
		}
	}
	if len(during) > 0 {
		t.Errorf("got %d requests 0.3-0.95s after the 429 (first %+v), want none: Retry-After pauses all", len(during), during[0])
	}
	if again == nil {
		t.Errorf("throttled record %v never sent again", throttled)
	} else if th := hits[failFirst]; again.attempt != th.attempt || again.at.Sub(throttledAt) < 950*time.Millisecond {
		t.Errorf("throttled record sent again at attempt %d after %v, want attempt %d (none spent) after about 1s",
			again.attempt, again.at.Sub(throttledAt), th.attempt)
	}

	// The 400 record is dead-lettered, reason rejected, in the local store.
	dead := jsonLines[entryJSON](t, dlqRun(t, "list", "--data", data, "--json"))
	if len(dead) != 1 || dead[0].Topic != "orders" || dead[0].Partition != rejectedAt.partition ||
		dead[0].Offset != rejectedAt.offset || dead[0].Reason != "rejected" || !strings.Contains(dead[0].Error, "HTTP 400") {
		t.Errorf("dead letters: got %+v, want one: orders/%d@%d, reason rejected, error naming HTTP 400",
			dead, rejectedAt.partition, rejectedAt.offset)
	}

	// Attempts spent, as the endpoint saw them: each record's last request
	// came at attempt 1 + the failures charged to it.
	charged := 0
	for _, h := range final {
		charged += h.attempt - 1
	}
	got := finalFigures(t, p.stdout.String())
	wantFigures(t, got, map[string]float64{
		"handled": n - 1, "committed": n, "dead-lettered": 1, "rejected": 1, "rejected calls": 1,
		"failed calls": failFirst, "throttled": 1, "retries": float64(charged), "endpoint errors": 0,
	})
	if got["outages"] < 1 {
		t.Errorf("final line: outages %v, want at least 1 (30 failures across many keys: the group backs off as a whole)", got["outages"])
	}
	if committed, hw := b.Committed("hooks", "orders"), b.HighWatermarks("orders"); !maps.Equal(committed, hw) {
		t.Errorf("committed %v, want the high watermarks %v", committed, hw)
	}
}

// TestConsumeHTTPOutcomesRead: per-item outcomes in a 2xx answer are read
// whatever the Content-Type's case; an items member that does not read as
// outcomes (a field of the wrong type), or a JSON answer too large to read
// whole, fails the call, so its records go again at attempt 2. Each of the
// three answers was taken as "every record done", dropping what it named.
func TestConsumeHTTPOutcomesRead(t *testing.T) {
	t.Parallel()
	json := http.Header{"Content-Type": {"application/json"}}
	for _, tt := range []struct {
		name   string
		header http.Header
		body   string
		dead   int // records dead-lettered
		again  bool
	}{
		{"Content-Type in capitals", http.Header{"Content-Type": {"Application/JSON"}},
			`{"items": [{"index": 0, "outcome": "reject", "error": "no"}]}`, 1, false},
		{"index as a string", json, `{"items": [{"index": "0", "outcome": "reject", "error": "no"}]}`, 0, true},
		{"error as a number", json, `{"items": [{"index": 0, "outcome": "reject", "error": 42}]}`, 0, true},
		{"over 4 MiB", json, `{"items": [{"index": 0, "outcome": "reject", "error": "` + strings.Repeat("x", 5<<20) + `"}]}`, 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			const n = 5
			b := newTopic(t, "answers", 1)
			produceKeyed(t, b, "answers", n, 1)
			ep := newEndpoint(t, 0, func(hs []hit) (int, http.Header, string) {
				if hs[0].n == 0 {
					return http.StatusOK, tt.header, tt.body
				}
				return http.StatusOK, nil, ""
			})
			data := t.TempDir()
			p := startConsume(t, "--brokers", b.Addrs()[0], "--topic", "answers", "--group", "answers",
				"--http", ep.url(), "--size", "5", "--ticker", "50ms", "--backoff", "20ms", "--max-backoff", "50ms",
				"--data", data, "--progress", "off", "--log-level", "error")
			p.waitCommitted(b, "answers", "answers")
			if code := p.stop(syscall.SIGTERM); code != 0 {
				t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, p.output())
			}
			again := false
			for _, h := range ep.snapshot() {
				again = again || h.attempt == 2
			}
			letters := jsonLines[entryJSON](t, dlqRun(t, "list", "--data", data, "--json"))
			if len(letters) != tt.dead || again != tt.again {
				t.Errorf("after the answer: %d dead letters, records sent again at attempt 2: %v; want %d and %v", len(letters), again, tt.dead, tt.again)
			}
		})
	}
}

// TestConsumeHTTPSUntrusted: an https endpoint whose certificate is not
// trusted (no --http-ca) fails the start-up check, naming the flag; with
// --no-check it is an endpoint error, paused and retried, and no record
// is dead-lettered. The check only dialled TCP, and each refused request
// failed an attempt: 41 of 100 records were dead-lettered in 5s.
func TestConsumeHTTPSUntrusted(t *testing.T) {
	t.Parallel()
	b := newTopic(t, "tls-untrusted", 1)
	produceKeyed(t, b, "tls-untrusted", 20, 4)
	ep := startEndpoint(t, 0, func([]hit) (int, http.Header, string) { return http.StatusOK, nil, "" }, true)
	args := []string{"consume", "--brokers", b.Addrs()[0], "--topic", "tls-untrusted", "--group", "untrusted",
		"--http", ep.url(), "--progress", "off", "--log-level", "error"}
	r := runBin(t, nil, args...)
	if r.code != exitError || !strings.Contains(r.stderr, "TLS handshake failed (--http-ca names a CA to trust") {
		t.Errorf("start against an untrusted endpoint: exit %d, stderr:\n%s\nwant exit 1 naming --http-ca", r.code, r.stderr)
	}
	wantEndpointErrorsOnly(t, "untrusted endpoint with --no-check", args[1:])
}

// wantEndpointErrorsOnly runs consume with args for 2 s, --no-check and
// --max-attempts 2 added, and checks that its endpoint's answers were
// endpoint errors: counted, and no record dead-lettered.
func wantEndpointErrorsOnly(t *testing.T, what string, args []string) {
	t.Helper()
	data := t.TempDir()
	p := startConsume(t, append(args, "--no-check", "--max-attempts", "2", "--backoff", "20ms", "--max-backoff", "100ms", "--data", data)...)
	time.Sleep(2 * time.Second)
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, p.output())
	}
	letters := jsonLines[entryJSON](t, dlqRun(t, "list", "--data", data, "--json"))
	fig := finalFigures(t, p.stdout.String())
	if len(letters) != 0 || fig["endpoint errors"] == 0 {
		t.Errorf("%s: %d dead letters, %v endpoint errors; want none dead-lettered, endpoint errors counted", what, len(letters), fig["endpoint errors"])
	}
}

// TestConsumeHTTPSToPlainEndpoint: an https URL whose endpoint answers in
// plain HTTP is an endpoint error too (with --no-check, which would have
// caught it at start): no record is dead-lettered. Go's client reports it
// as http.ErrSchemeMismatch, which the TLS check missed: every record
// failed its attempts (found in review).
func TestConsumeHTTPSToPlainEndpoint(t *testing.T) {
	t.Parallel()
	b := newTopic(t, "tls-plain", 1)
	produceKeyed(t, b, "tls-plain", 20, 4)
	ep := newEndpoint(t, 0, func([]hit) (int, http.Header, string) { return http.StatusOK, nil, "" })
	wantEndpointErrorsOnly(t, "https to a plain endpoint", []string{"--brokers", b.Addrs()[0], "--topic", "tls-plain", "--group", "plain",
		"--http", strings.Replace(ep.url(), "http://", "https://", 1), "--progress", "off", "--log-level", "error"})
}

// TestConsumeHTTPPasswordHidden: a password in the --http URL is shown as
// xxxxx in the dead letters' error and in the output, never as given.
func TestConsumeHTTPPasswordHidden(t *testing.T) {
	t.Parallel()
	b := newTopic(t, "secret-url", 1)
	produceKeyed(t, b, "secret-url", 3, 3)
	ep := newEndpoint(t, 0, func([]hit) (int, http.Header, string) { return http.StatusUnprocessableEntity, nil, "no" })
	u := strings.Replace(ep.url(), "http://", "http://svc:s3cretPW@", 1)
	data := t.TempDir()
	p := startConsume(t, "--brokers", b.Addrs()[0], "--topic", "secret-url", "--group", "secret", "--http", u,
		"--size", "1", "--data", data, "--progress", "off", "--log-level", "warn")
	p.waitCommitted(b, "secret", "secret-url")
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, p.output())
	}
	letters := jsonLines[entryJSON](t, dlqRun(t, "list", "--data", data, "--json"))
	if len(letters) != 3 {
		t.Fatalf("got %d dead letters, want 3 (every record rejected)", len(letters))
	}
	for _, l := range letters {
		if strings.Contains(l.Error, "s3cretPW") || !strings.Contains(l.Error, "svc:xxxxx@") {
			t.Errorf("dead letter error %q: want the URL's password shown as xxxxx", l.Error)
		}
	}
	if out := p.output(); strings.Contains(out, "s3cretPW") {
		t.Errorf("the password is in consume's output:\n%s", out)
	}
}

// TestConsumeEndpointErrorLogHeldBack: an endpoint that keeps answering
// 401 is logged once per 10 s, not once per request, and the next line
// says how many it held back ("suppressed"), where the lines in between
// used to vanish uncounted.
func TestConsumeEndpointErrorLogHeldBack(t *testing.T) {
	t.Parallel() // about 11 s of waiting
	b := newTopic(t, "held-back", 1)
	produceKeyed(t, b, "held-back", 20, 4)
	ep := newEndpoint(t, 0, func([]hit) (int, http.Header, string) { return http.StatusUnauthorized, nil, "who?" })
	p := startConsume(t, "--brokers", b.Addrs()[0], "--topic", "held-back", "--group", "held-back", "--http", ep.url(),
		"--backoff", "20ms", "--max-backoff", "50ms", "--progress", "off", "--log-level", "warn")
	p.waitFor(30*time.Second, "two endpoint error lines", func() bool {
		return strings.Count(p.stderr.String(), "endpoint error: check --http") >= 2
	})
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, p.output())
	}
	var lines []string
	for _, l := range strings.Split(p.stderr.String(), "\n") {
		if strings.Contains(l, "endpoint error: check --http") {
			lines = append(lines, l)
		}
	}
	if strings.Contains(lines[0], `"suppressed"`) || !strings.Contains(lines[1], `"suppressed": `) {
		t.Fatalf("endpoint error lines: got\n%s\nwant the first without a suppressed count, the second with one", strings.Join(lines[:2], "\n"))
	}
	t.Logf("second line: %s", lines[1])
}
