package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/orderly-go/orderly/group"
)

// TestHTTPStatusPolicy sends one batch to a real HTTP server answering
// each status, through the sink's send (what the group's Do calls), and
// checks how consume classes the answer: done, the endpoint paused (429,
// 503: for Retry-After), retried with backoff (other 5xx), an endpoint
// error (3xx, 401, 403, 404, 407: retried after the endpoint backoff,
// never dead-lettered), or rejected (other 4xx: dead-lettered).
func TestHTTPStatusPolicy(t *testing.T) {
	tests := []struct {
		status int
		class  string // ok, throttled, failed, endpoint, rejected
		pause  time.Duration
	}{
		{200, "ok", 0}, {201, "ok", 0}, {204, "ok", 0},
		{301, "endpoint", time.Second}, {307, "endpoint", time.Second},
		{400, "rejected", 0}, {409, "rejected", 0}, {422, "rejected", 0},
		{401, "endpoint", time.Second}, {403, "endpoint", time.Second}, {404, "endpoint", time.Second}, {407, "endpoint", time.Second},
		{429, "throttled", 2 * time.Second}, {503, "throttled", 2 * time.Second},
		{500, "failed", 0}, {502, "failed", 0}, {504, "failed", 0},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.status), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.status == 301 || tt.status == 307 {
					w.Header().Set("Location", "/elsewhere")
				}
				w.Header().Set("Retry-After", "2")
				w.WriteHeader(tt.status)
			}))
			defer srv.Close()
			ctr := &sinkCounters{}
			gt := &gate{}
			defer gt.stop()
			s, err := newHTTPSink(&consumeOpts{httpURL: srv.URL, size: 1, num: 2, backoff: time.Second, maxBackoff: 4 * time.Second}, gt, ctr, zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			defer s.close()
			batch := []*group.Message{{Topic: "t", Partition: 3, Offset: 42, Key: []byte("k"), Value: []byte("v"), Attempt: 1}}
			err = s.send(context.Background(), batch)
			var be *group.BatchError
			switch {
			case tt.class == "ok" && err != nil:
				t.Errorf("send: %v, want nil (done)", err)
			case tt.class != "ok" && (!errors.As(err, &be) || be.Len() != 1):
				t.Errorf("send: %v, want a BatchError naming the one item", err)
			case tt.class == "rejected" || tt.class == "failed":
				if !strings.Contains(err.Error(), "t/3@42") || !strings.Contains(err.Error(), "HTTP "+strconv.Itoa(tt.status)) {
					t.Errorf("send: %v, want the error to name t/3@42 and the status", err)
				}
			}
			got := map[string]int64{"ok": ctr.ok.Load(), "throttled": ctr.throttled.Load(), "failed": ctr.failed.Load(),
				"endpoint": ctr.endpoint.Load(), "rejected": ctr.rejected.Load()}
			for class, n := range got {
				want := int64(0)
				if class == tt.class {
					want = 1
				}
				if n != want {
					t.Errorf("counter %s: got %d, want %d", class, n, want)
				}
			}
			// Pauses: Retry-After for 429 and 503, the endpoint backoff
			// (--backoff) for endpoint errors, none otherwise.
			if rem := gt.remaining(); rem > tt.pause || rem < tt.pause-500*time.Millisecond {
				t.Errorf("gate closed for %v more, want about %v", rem, tt.pause)
			}
		})
	}
}

// TestRetryAfter reads Retry-After as seconds or an HTTP date; what is
// missing, negative or garbled means 1s, and it is capped at an hour. One
// that asks for no pause (0, a date past) means 1s too: taken at its word,
// an overloaded endpoint answering 503 with "Retry-After: 0" got about
// 2,000 requests a second.
func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		v    string
		want time.Duration
	}{
		{"", time.Second}, {"0", time.Second}, {"3", 3 * time.Second}, {" 7 ", 7 * time.Second}, {"-1", time.Second},
		{"soon", time.Second}, {"99999", time.Hour},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), time.Second},
	}
	for _, tt := range tests {
		if got := retryAfter(tt.v, now); got != tt.want {
			t.Errorf("retryAfter(%q): got %v, want %v", tt.v, got, tt.want)
		}
	}
}

// TestApplyOutcomes: the items an endpoint or command names become the
// BatchError's items; a bad index or outcome is an error naming it.
func TestApplyOutcomes(t *testing.T) {
	batch := []*group.Message{{Topic: "t", Offset: 1}, {Topic: "t", Offset: 2}, {Topic: "t", Offset: 3}}
	idx := func(i int) *int { return &i }
	ms := func(n int64) *int64 { return &n }
	tests := []struct {
		name  string
		outs  []outcomeJSON
		named int    // items in the BatchError; -1: an error that is not one
		err   string // in the error
	}{
		{"none", nil, 0, ""},
		{"done only", []outcomeJSON{{Index: idx(0), Outcome: "done"}}, 0, ""},
		{"retry", []outcomeJSON{{Index: idx(1), Outcome: "retry", Error: "busy"}}, 1, "t/0@2: POST x said retry: busy"},
		{"defer and reject", []outcomeJSON{{Index: idx(0), Outcome: "defer", DelayMS: ms(20)}, {Index: idx(2), Outcome: "reject", Error: "bad"}}, 2, "t/0@3: POST x rejected it: bad"},
		{"index out of range", []outcomeJSON{{Index: idx(3), Outcome: "retry"}}, -1, "index 3 outside the batch of 3"},
		{"no index", []outcomeJSON{{Outcome: "retry"}}, -1, "index none outside the batch of 3"},
		{"twice", []outcomeJSON{{Index: idx(1), Outcome: "retry"}, {Index: idx(1), Outcome: "reject"}}, -1, "index 1 named twice"},
		{"unknown", []outcomeJSON{{Index: idx(1), Outcome: "maybe"}}, -1, `outcome "maybe"`},
		{"negative delay", []outcomeJSON{{Index: idx(1), Outcome: "defer", DelayMS: ms(-5)}}, -1, "delay_ms -5 is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := applyOutcomes(batch, tt.outs, time.Second, "POST x", &sinkCounters{})
			var be *group.BatchError
			switch {
			case tt.named == 0 && err != nil:
				t.Errorf("got %v, want nil", err)
			case tt.named > 0 && (!errors.As(err, &be) || be.Len() != tt.named || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("got %v, want a BatchError of %d items naming %q", err, tt.named, tt.err)
			case tt.named < 0 && (!errors.Is(err, errBadOutcome) || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("got %v, want errBadOutcome naming %q", err, tt.err)
			}
		})
	}
}

// TestHTTPUnreachableAndTimeout: a refused connection fails the call's
// records (retried with backoff); a call past its ctx's deadline (the
// group's MsgTimeout, --timeout) returns the ctx's error, which the group
// counts as a failed attempt.
func TestHTTPUnreachableAndTimeout(t *testing.T) {
	batch := []*group.Message{{Topic: "t", Partition: 1, Offset: 9, Value: []byte("v"), Attempt: 1}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String() + "/hook"
	ln.Close()
	ctr := &sinkCounters{}
	s, err := newHTTPSink(&consumeOpts{httpURL: refused, size: 1, num: 1, backoff: time.Second, maxBackoff: time.Second}, &gate{}, ctr, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	err = s.send(context.Background(), batch)
	var be *group.BatchError
	if !errors.As(err, &be) || be.Len() != 1 || ctr.failed.Load() != 1 || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("refused: got %v, failed %d; want the record failed (connection refused), counted", err, ctr.failed.Load())
	}

	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // then the server notices the client hang up
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	defer slow.Close()
	s, err = newHTTPSink(&consumeOpts{httpURL: slow.URL, size: 1, num: 1, backoff: time.Second, maxBackoff: time.Second}, &gate{}, ctr, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = s.send(ctx, batch)
	if !errors.Is(err, context.DeadlineExceeded) || errors.As(err, &be) || time.Since(start) > 5*time.Second {
		t.Errorf("timeout: got %v after %v, want the ctx's deadline error at once (not a BatchError)", err, time.Since(start))
	}
}

// TestExecNotFound: a command the shell cannot find (exit 127) is a
// command error: the batch runs again after the backoff, uncharged,
// never dead-lettered.
func TestExecNotFound(t *testing.T) {
	ctr := &sinkCounters{}
	gt := &gate{}
	defer gt.stop()
	s := newExecSink(&consumeOpts{execCmd: "/nonexistent/handler --flag", backoff: time.Second, maxBackoff: time.Second}, gt, ctr, zap.NewNop())
	err := s.send(context.Background(), []*group.Message{{Topic: "t", Offset: 1, Value: []byte("v"), Attempt: 1}})
	var be *group.BatchError
	if !errors.As(err, &be) || be.Len() != 1 || ctr.endpoint.Load() != 1 || ctr.rejected.Load() != 0 || gt.remaining() <= 0 {
		t.Errorf("got %v, endpoint errors %d, rejected %d, pause %v; want the record deferred, a command error counted, the gate closed",
			err, ctr.endpoint.Load(), ctr.rejected.Load(), gt.remaining())
	}
	if ctr.lastEndpointError() != "exit 127" {
		t.Errorf("last command error %q, want exit 127", ctr.lastEndpointError())
	}
}

// TestOrderingFlag maps --ordering onto the group's Ordering.
func TestOrderingFlag(t *testing.T) {
	for flag, want := range map[string]group.Ordering{"key": group.OrderLanes, "partition": group.OrderPartition, "none": group.Unordered} {
		if got := (&consumeOpts{ordering: flag}).orderingValue(); got != want {
			t.Errorf("--ordering %s: got %v, want %v", flag, got, want)
		}
	}
}

// TestCommandEnv: the --exec command gets consume's environment without
// the SASL password.
func TestCommandEnv(t *testing.T) {
	got := commandEnv([]string{"PATH=/bin", "ORDERLY_SASL_PASSWORD=s3cret", "ORDERLY_SASL_USER=alice", "HOME=/root"})
	want := []string{"PATH=/bin", "ORDERLY_SASL_USER=alice", "HOME=/root"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestExecLeftoverChild: a command that exits 0 but leaves a child holding
// its stdout is done after the wait delay, not retried.
func TestExecLeftoverChild(t *testing.T) {
	ctr := &sinkCounters{}
	s := newExecSink(&consumeOpts{execCmd: "sleep 30 & echo started", backoff: time.Second, maxBackoff: time.Second}, &gate{}, ctr, zap.NewNop())
	start := time.Now()
	err := s.send(context.Background(), []*group.Message{{Topic: "t", Offset: 1, Value: []byte("v"), Attempt: 1}})
	if err != nil || ctr.ok.Load() != 1 || time.Since(start) > 20*time.Second {
		t.Errorf("got %v, ok %d after %v; want done after the wait delay (2s)", err, ctr.ok.Load(), time.Since(start))
	}
}

// TestEndpointErrorsInFlight: four calls in flight at once all get 403;
// the errors answered while the gate is already closed do not double the
// endpoint backoff again.
func TestEndpointErrorsInFlight(t *testing.T) {
	const calls = 4
	var arrived sync.WaitGroup
	arrived.Add(calls)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		arrived.Wait() // all four are in flight before any is answered
		w.WriteHeader(http.StatusForbidden)
	}))
	defer srv.Close()
	ctr := &sinkCounters{}
	gt := &gate{}
	defer gt.stop()
	s, err := newHTTPSink(&consumeOpts{httpURL: srv.URL, size: 1, num: calls, backoff: time.Second, maxBackoff: time.Minute}, gt, ctr, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			s.send(context.Background(), []*group.Message{{Topic: "t", Offset: int64(i), Value: []byte("v"), Attempt: 1}})
		})
	}
	wg.Wait()
	if ctr.endpoint.Load() != calls {
		t.Fatalf("endpoint errors %d, want %d", ctr.endpoint.Load(), calls)
	}
	if rem := gt.remaining(); rem > time.Second {
		t.Errorf("gate closed for %v, want at most the first backoff (1s)", rem)
	}
	if next := s.endpoint.failed(); next != 2*time.Second {
		t.Errorf("next endpoint backoff %v, want 2s: one doubling for errors answered at once", next)
	}
}

// TestConsumeMaxAttempts: a record the endpoint always answers 500 is
// sent --max-attempts times, at attempts 1, 2, 3, each after the backoff,
// then dead-lettered with reason max_attempts; the rest is done and the
// commit passes it.
func TestConsumeMaxAttempts(t *testing.T) {
	t.Parallel()
	const n = 20
	b := newTopic(t, "flaky", 1)
	produceKeyed(t, b, "flaky", n, 4)
	ep := newEndpoint(t, 0, func(hs []hit) (int, http.Header, string) {
		if hs[0].value == "v3" {
			return http.StatusInternalServerError, nil, "always"
		}
		return http.StatusOK, nil, ""
	})
	data := t.TempDir()
	p := startConsume(t, "--brokers", b.Addrs()[0], "--topic", "flaky", "--group", "flaky", "--http", ep.url(),
		"--max-attempts", "3", "--backoff", "200ms", "--max-backoff", "400ms", "--jitter", "0", "--data", data,
		"--progress", "off", "--log-level", "error")
	p.waitCommitted(b, "flaky", "flaky")
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, p.output())
	}
	var tries []hit
	for _, h := range ep.snapshot() {
		if h.value == "v3" {
			tries = append(tries, h)
		}
	}
	if len(tries) != 3 {
		t.Fatalf("v3 sent %d times, want 3 (--max-attempts)", len(tries))
	}
	for i, h := range tries {
		if h.attempt != i+1 {
			t.Errorf("v3 try %d at attempt %d, want %d", i, h.attempt, i+1)
		}
		// --backoff 200ms doubling, no jitter: 200ms, then 400ms.
		if want := 200 * time.Millisecond << max(i-1, 0); i > 0 && h.at.Sub(tries[i-1].at) < want {
			t.Errorf("v3 try %d came %v after the one before, want at least %v", i, h.at.Sub(tries[i-1].at), want)
		}
	}
	dead := jsonLines[entryJSON](t, dlqRun(t, "list", "--data", data, "--json"))
	if len(dead) != 1 || dead[0].Reason != "max_attempts" || dead[0].Attempts != 3 || dead[0].Offset != tries[0].offset {
		t.Errorf("dead letters %+v, want v3 alone, reason max_attempts after 3 attempts", dead)
	}
}

// TestConsumeOrdering runs the same traffic with --ordering key and
// --ordering partition: by key, requests of one partition overlap (many
// keys at once); by partition, never, and each partition's offsets come
// in order. With --ordering none, requests of a single key overlap.
func TestConsumeOrdering(t *testing.T) {
	t.Parallel()
	for _, ordering := range []string{"key", "partition", "none"} {
		t.Run(ordering, func(t *testing.T) {
			t.Parallel()
			b := newTopic(t, "ord", 2)
			keys := 20
			if ordering == "none" {
				keys = 1
			}
			produceKeyed(t, b, "ord", 200, keys)
			ep := newEndpoint(t, 3*time.Millisecond, func([]hit) (int, http.Header, string) { return http.StatusOK, nil, "" })
			p := startConsume(t, "--brokers", b.Addrs()[0], "--topic", "ord", "--group", "ord", "--http", ep.url(),
				"--num", "8", "--ordering", ordering, "--progress", "off", "--log-level", "error")
			p.waitCommitted(b, "ord", "ord")
			if code := p.stop(syscall.SIGTERM); code != 0 {
				t.Fatalf("exit %d\n%s", code, p.output())
			}
			overlaps, outOfOrder := 0, 0
			last := map[int32]hit{}
			for _, h := range ep.snapshot() {
				if prev, ok := last[h.partition]; ok {
					if h.at.Before(prev.end) {
						overlaps++
					}
					if h.offset <= prev.offset {
						outOfOrder++
					}
				}
				if prev, ok := last[h.partition]; !ok || h.end.After(prev.end) {
					last[h.partition] = h
				}
			}
			switch {
			case ordering == "key" && overlaps == 0:
				t.Errorf("--ordering key: no two requests of a partition overlapped, want many keys at once")
			case ordering == "partition" && (overlaps > 0 || outOfOrder > 0):
				t.Errorf("--ordering partition: %d overlapping requests of a partition, %d out of offset order; want none", overlaps, outOfOrder)
			}
			ep.mu.Lock()
			concurrent := len(ep.concurrent)
			ep.mu.Unlock()
			if (ordering == "none") != (concurrent > 0) {
				t.Errorf("--ordering %s: %d requests arrived while another of their key was in flight, want some only with none", ordering, concurrent)
			}
		})
	}
}

// TestGateCloseIfOpenOnce: errors answered together close the gate once:
// of 64 callers released at once, one computes the backoff (doubling the
// endpoint's), and all are told the same pause.
func TestGateCloseIfOpenOnce(t *testing.T) {
	g := &gate{}
	defer g.stop()
	const callers = 64
	var next atomic.Int32
	var start, done sync.WaitGroup
	start.Add(1)
	pauses := make([]time.Duration, callers)
	for i := range callers {
		done.Go(func() {
			start.Wait()
			pauses[i] = g.closeIfOpen(func() time.Duration {
				next.Add(1)
				time.Sleep(10 * time.Millisecond) // widens the window a check-then-close would leave
				return time.Minute
			})
		})
	}
	start.Done()
	done.Wait()
	if n := next.Load(); n != 1 {
		t.Fatalf("backoffs computed: got %d, want 1", n)
	}
	for i, d := range pauses {
		if d <= 59*time.Second || d > time.Minute {
			t.Fatalf("caller %d: got pause %v, want about 1m", i, d)
		}
	}
}
