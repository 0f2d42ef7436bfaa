package main

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestConsumeCallCounts runs `orderly consume --size 1 --num 4 --admin`
// against an endpoint that answers its first two requests 429 (Retry-After
// 1), its 6th to 8th 500, its 11th 401 (an endpoint error), v30 the first
// time with a 200 whose outcomes defer it, v35 the first time with a 200
// whose outcomes retry it, v40 always 400, and everything else 200.
// /metrics, read once the commit is at the high watermarks, counts the
// group's Do calls as the README says they relate to the final line's
// endpoint calls: result="error" is the failed and rejected calls and the
// 200 that named a retry, result="ok" the ok calls less the two 200s that
// named outcomes, and result="deferred" the throttled calls, the endpoint
// error and the 200 that only deferred, plus the calls the gate deferred
// without sending: the Do calls that the final line's calls (the requests
// the endpoint received) lack.
func TestConsumeCallCounts(t *testing.T) {
	t.Parallel()
	const n, keys = 60, 6
	b := newTopic(t, "calls", 2)
	produceKeyed(t, b, "calls", n, keys)
	deferredOnce, retriedOnce := false, false
	ep := newEndpoint(t, 5*time.Millisecond, func(hs []hit) (int, http.Header, string) {
		h := hs[0]
		switch {
		case h.n < 2:
			return http.StatusTooManyRequests, http.Header{"Retry-After": {"1"}}, ""
		case h.n >= 5 && h.n < 8:
			return http.StatusInternalServerError, nil, "database down"
		case h.n == 10:
			return http.StatusUnauthorized, nil, "bad token"
		case h.value == "v30" && !deferredOnce:
			deferredOnce = true
			return http.StatusOK, http.Header{"Content-Type": {"application/json"}}, `{"items": [{"index": 0, "outcome": "defer", "delay_ms": 20}]}`
		case h.value == "v35" && !retriedOnce:
			retriedOnce = true
			return http.StatusOK, http.Header{"Content-Type": {"application/json"}}, `{"items": [{"index": 0, "outcome": "retry", "error": "not yet"}]}`
		case h.value == "v40":
			return http.StatusBadRequest, nil, "malformed"
		}
		return http.StatusOK, nil, ""
	})
	p := startConsume(t, "--brokers", b.Addrs()[0], "--topic", "calls", "--group", "calls", "--http", ep.url(),
		"--size", "1", "--num", "4", "--backoff", "20ms", "--max-backoff", "50ms", "--data", t.TempDir(),
		"--admin", "127.0.0.1:0", "--progress", "off", "--log-level", "error")
	url := p.adminURL()
	p.waitCommitted(b, "calls", "calls")
	calls := handlerCalls(t, url+"metrics")
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, p.output())
	}
	got := finalFigures(t, p.stdout.String())
	wantFigures(t, got, map[string]float64{
		"calls": float64(len(ep.snapshot())), "throttled": 2, "failed calls": 3, "rejected calls": 1,
		"items named retry or defer": 2, "endpoint errors": 1, "timed out": 0,
	})
	if want := got["failed calls"] + got["rejected calls"] + 1; calls["error"] != want {
		t.Errorf(`orderly_handler_calls_total{result="error"}: got %v, want %v (the final line's failed and rejected calls, and the 200 that named a retry)`, calls["error"], want)
	}
	if want := got["ok"] - 2; calls["ok"] != want {
		t.Errorf(`orderly_handler_calls_total{result="ok"}: got %v, want %v (the final line's ok less the 200s that deferred and retried)`, calls["ok"], want)
	}
	// The Do calls the endpoint never saw: the gate deferred them.
	unsent := calls["ok"] + calls["error"] + calls["deferred"] - got["calls"]
	if want := got["throttled"] + got["endpoint errors"] + 1 + unsent; unsent < 0 || calls["deferred"] != want {
		t.Errorf(`orderly_handler_calls_total{result="deferred"}: got %v, want %v (throttled %v, endpoint errors %v, the 200 that deferred, %v calls the gate deferred unsent)`,
			calls["deferred"], want, got["throttled"], got["endpoint errors"], unsent)
	}
	t.Logf("Do calls: %v; final line: calls %v, ok %v, throttled %v; unsent %v", calls, got["calls"], got["ok"], got["throttled"], unsent)
}

// handlerCalls reads orderly_handler_calls_total by result from a
// /metrics page.
func handlerCalls(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: got %d, %v", url, resp.StatusCode, err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "orderly_handler_calls_total{") {
			continue
		}
		_, rest, ok := strings.Cut(line, `result="`)
		result, _, _ := strings.Cut(rest, `"`)
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if !ok || err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		out[result] = v
	}
	for _, r := range []string{"ok", "error", "deferred"} {
		if _, ok := out[r]; !ok {
			t.Fatalf(`%s: no orderly_handler_calls_total{result=%q}`, url, r)
		}
	}
	return out
}
