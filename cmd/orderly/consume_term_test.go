package main

import (
	"net/http"
	"regexp"
	"syscall"
	"testing"
	"time"
)

// TestConsumeSIGTERM stops `orderly consume` with SIGTERM mid-run: it
// exits 0 after draining, and its final line's committed count is what
// the broker holds; a second run of the same group then goes on from
// there and repeats nothing: every record is answered 2xx exactly once
// over the two runs, per key in offset order, over at most --num kept-alive
// connections a run. The first run is configured
// through ORDERLY_* variables, with ORDERLY_NUM set to garbage and --num
// given on the command line: the flag wins, the variable is not read.
func TestConsumeSIGTERM(t *testing.T) {
	t.Parallel()
	const n, keys = 3000, 50
	b := newTopic(t, "events", 4)
	produceKeyed(t, b, "events", n, keys)
	ep := newEndpoint(t, 10*time.Millisecond, func([]hit) (int, http.Header, string) { return http.StatusOK, nil, "" })

	first := startConsumeEnv(t, []string{
		"ORDERLY_BROKERS=" + b.Addrs()[0], "ORDERLY_TOPIC=events", "ORDERLY_GROUP=relay",
		"ORDERLY_HTTP=" + ep.url(), "ORDERLY_NUM=not-a-number", "ORDERLY_PROGRESS=off", "ORDERLY_LOG_LEVEL=warn",
	}, "--num", "8")
	first.waitFor(60*time.Second, "500 records at the endpoint", func() bool { return ep.okCount() >= 500 })
	if code := first.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("first run: exit %d after SIGTERM, want 0\n%s", code, first.output())
	}
	var committed int64
	for _, o := range b.Committed("relay", "events") {
		committed += o
	}
	if committed == 0 || committed >= n {
		t.Fatalf("first run committed %d of %d records, want some and not all (stopped mid-run)\n%s", committed, n, first.output())
	}
	if got := finalFigures(t, first.stdout.String())["committed"]; int64(got) != committed {
		t.Errorf("first run's final line: committed %v, want %d (the broker's committed offsets)", got, committed)
	}
	firstOK := ep.okCount()

	second := startConsume(t, "--brokers", b.Addrs()[0], "--topic", "events", "--group", "relay",
		"--http", ep.url(), "--num", "8", "--progress-every", "1s", "--log-level", "warn")
	second.waitCommitted(b, "relay", "events")
	// stdout is not a terminal: a plain progress line every --progress-every.
	second.waitFor(30*time.Second, "a progress line", func() bool {
		return progressRE.MatchString(second.stdout.String())
	})
	if code := second.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("second run: exit %d after SIGTERM, want 0\n%s", code, second.output())
	}
	hits := ep.snapshot()
	checkKeyOrder(t, ep, hits)
	seen := map[coord]int{}
	for _, h := range hits {
		seen[h.coord()]++
	}
	repeated := 0
	for c, k := range seen {
		if k != 1 {
			if repeated++; repeated <= 5 {
				t.Errorf("%v sent %d times, want once: a drained and committed run leaves nothing to repeat", c, k)
			}
		}
	}
	// Keep-alive: each run's 8 workers reuse their connections (and the
	// start-up check dials one of its own).
	if c := ep.conns.Load(); c > 2*(8+1) {
		t.Errorf("%d requests over %d connections, want at most %d: a keep-alive pool of --num per run", len(hits), c, 2*(8+1))
	}
	if len(seen) != n || len(hits) != n {
		t.Errorf("got %d requests for %d distinct records (%d in the first run), want %d each", len(hits), len(seen), firstOK, n)
	}
}

var progressRE = regexp.MustCompile(`(?m)^ +[0-9.]+s  (?:[A-Z]+ \S+(?: \+\d+)?  )?\S+/s  handled \S+  committed \S+  lag \S+  in flight \S+  waiting \S+  retries \d+  dead-lettered \d+  throttled \d+  failed calls \d+  timed out \d+  endpoint errors \d+$`)

// startConsumeEnv is startConsume with ORDERLY_* variables.
func startConsumeEnv(t *testing.T, vars []string, args ...string) *consumeProc {
	t.Helper()
	return startConsumeWith(t, vars, args...)
}

// TestConsumeSIGTERMWhilePaused: an endpoint that answers every request
// 429 with Retry-After: 60 pauses the group; a SIGTERM during the pause
// still drains and exits 0 at once, committing nothing it did not do.
func TestConsumeSIGTERMWhilePaused(t *testing.T) {
	t.Parallel()
	b := newTopic(t, "paused", 2)
	produceKeyed(t, b, "paused", 50, 5)
	ep := newEndpoint(t, 0, func([]hit) (int, http.Header, string) {
		return http.StatusTooManyRequests, http.Header{"Retry-After": {"60"}}, ""
	})
	p := startConsume(t, "--brokers", b.Addrs()[0], "--topic", "paused", "--group", "paused", "--http", ep.url(),
		"--num", "4", "--progress", "off", "--log-level", "error")
	p.waitFor(60*time.Second, "a 429 answered", func() bool { return len(ep.snapshot()) > 0 })
	time.Sleep(200 * time.Millisecond) // let the pause take hold
	start := time.Now()
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, p.output())
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("took %v to stop during a 60s pause, want well under the pause", d)
	}
	for part, off := range b.Committed("paused", "paused") {
		if off != 0 {
			t.Errorf("partition %d committed at %d, want nothing past records never answered 2xx", part, off)
		}
	}
	got := finalFigures(t, p.stdout.String())
	if got["throttled"] < 1 || got["handled"] != 0 {
		t.Errorf("final line: throttled %v, handled %v; want at least one 429 and nothing handled", got["throttled"], got["handled"])
	}
}
