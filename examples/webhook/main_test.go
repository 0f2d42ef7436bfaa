package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestWebhook runs the example as `go run ./examples/webhook` does: the
// real orderly binary (built by the example) forwards 800 events of 200
// orders to the service, which fails 10% of requests with 500; the
// service must end with every order complete and no event out of order,
// and orderly consume must have retried the failed requests and exited
// 0 after its SIGTERM.
func TestWebhook(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := run(ctx, []string{"--orders", "200", "--fail", "0.1"}, &stdout, &stderr)
	out := stdout.String()
	if err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	if !strings.Contains(out, "service: orders complete 200 of 200; events out of order 0") {
		t.Errorf("want every order complete, none out of order:\n%s", out)
	}
	m := regexp.MustCompile(`(\d+) answered 500, retried by consume\); 800 events applied`).FindStringSubmatch(out)
	final := regexp.MustCompile(`failed calls (\d+)`).FindAllStringSubmatch(out, -1)
	if m == nil || len(final) == 0 || final[len(final)-1][1] != m[1] {
		t.Errorf("want the service's 500s counted as consume's failed calls, and 800 events applied:\n%s", out)
	}
}

// TestServiceOutcomes posts batches to the service directly: an event out
// of order is named with the outcome reject, a redelivery is acknowledged
// without being applied twice, a body that is not a batch is a 400.
func TestServiceOutcomes(t *testing.T) {
	svc := newService(0)
	srv := httptest.NewServer(svc)
	defer srv.Close()
	post := func(body string) (int, map[string][]outcome) {
		t.Helper()
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got map[string][]outcome
		json.NewDecoder(resp.Body).Decode(&got) //nolint:errcheck // a 400 has no JSON
		return resp.StatusCode, got
	}
	rec := func(off int, order, status string) string {
		v, _ := json.Marshal(event{Order: order, Status: status})
		b, _ := json.Marshal(record{Topic: "orders", Offset: int64(off), Key: &order, Value: ptr(string(v)), Attempt: 1})
		return string(b)
	}
	code, got := post("[" + rec(0, "o1", "created") + "," + rec(1, "o1", "shipped") + "," + rec(2, "o2", "created") + "]")
	if code != http.StatusOK || len(got["items"]) != 1 || got["items"][0].Index != 1 || got["items"][0].Outcome != "reject" {
		t.Errorf("out of order: got %d %+v, want 200 with item 1 rejected", code, got)
	}
	code, got = post("[" + rec(0, "o1", "created") + "," + rec(3, "o1", "paid") + "]")
	if r := svc.report(); code != http.StatusOK || len(got["items"]) != 0 || r.dupes != 1 || r.events != 3 {
		t.Errorf("redelivery: got %d %+v, %d events, %d redeliveries; want 200, nothing named, 3 events, 1 redelivery", code, got, r.events, r.dupes)
	}
	if code, _ := post("{}"); code != http.StatusBadRequest {
		t.Errorf("not a batch: got %d, want 400", code)
	}
}

func ptr[T any](v T) *T { return &v }
