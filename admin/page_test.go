package admin

import (
	"strings"
	"testing"

	"github.com/orderly-go/orderly/group"
)

// TestStatusPage: the page shows the group's status and reason, the
// partitions table with a coloured status per row and every outcome of
// each partition, the stuck worker, and reloads itself.
func TestStatusPage(t *testing.T) {
	f := &fakeGroup{s: sampleStats(), ready: true, live: false, why: "1 workers stuck in Do"}
	code, page := get(t, Handler(f, Options{}), "GET", "/")
	if code != 200 {
		t.Fatalf("/: %d\n%s", code, page)
	}
	for _, want := range []string{
		`<meta http-equiv="refresh" content="2">`,
		`<div class="banner st-5" id="group-status">`,
		`<span class="code">STALL</span><span class="reason">orders/1: committed offset stuck at 400 with lag 120</span>`,
		`<span class="bad" id="live">not live</span>: 1 workers stuck in Do`,
		`<table id="partitions-table">`,
		`<tr class="st-5" data-topic="orders" data-partition="1" data-status="STALL">`,
		`<tr class="st-1" data-topic="orders" data-partition="0" data-status="OK">`,
		`<span class="badge st-5">STALL</span>`,
		`<th>handled</th><th>dead-lettered</th><th>parked</th><th>skipped</th><th>resumed</th><th>failed attempts</th>`,
		`<td>570</td><td>3</td><td>4</td><td>2</td><td>5</td><td>9</td></tr>`,
		`<div class="w stuck" title="worker 0: stuck in Do for 1m35s">0</div>`,
		`<table id="stuck-workers"`,
		`<h2>Partitions not OK (1)</h2>`,
		`<td>topic:orders.dlq</td>`,
		`<a href="metrics">metrics</a>`,
		`<div class="v">500µs / &gt;1m0s</div><div class="k">Do duration p50 / p99</div>`, // the p99 call is above the last bound
		`<div class="v">250ms / 250ms</div><div class="k">end-to-end latency p50 / p99</div>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page has no %s", want)
		}
	}
	if strings.Contains(page, "<script") {
		t.Error("the page has a script: it needs none")
	}
	_, page = get(t, Handler(f, Options{Refresh: -1, Pprof: true}), "GET", "/")
	if strings.Contains(page, `http-equiv="refresh"`) || !strings.Contains(page, `<a href="debug/pprof/">pprof</a>`) {
		t.Error("Refresh -1 and Pprof: want no reload and a pprof link")
	}
}

// TestStatusPageEscapes: topic names and reasons are user input; the page
// escapes them in text and in attributes.
func TestStatusPageEscapes(t *testing.T) {
	const evil = `<script>alert("x")</script>`
	const attr = `"><img src=x onerror=alert(1)>`
	f := &fakeGroup{s: sampleStats(), ready: true, live: false, why: evil}
	f.set(func(s *group.Stats) {
		s.GroupID = evil
		s.PartitionStats[1].Topic = attr
		s.PartitionStats[1].Status.Reason = evil
		s.Status.Reason = evil
		s.DeadLetterDestination = "topic:" + evil
	})
	_, page := get(t, Handler(f, Options{}), "GET", "/")
	for _, bad := range []string{"<script", "<img"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page contains %q unescaped", bad)
		}
	}
	for _, want := range []string{`&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;`, `data-topic="&#34;&gt;&lt;img src=x onerror=alert(1)&gt;"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page has no %s", want)
		}
	}
}

// TestStatusPageEmpty: before the join, no partitions and no workers.
func TestStatusPageEmpty(t *testing.T) {
	f := &fakeGroup{s: group.Stats{GroupID: "idle", Status: group.PartitionStatus{Code: group.StatusOK}}, live: true}
	code, page := get(t, Handler(f, Options{}), "GET", "/")
	if code != 200 || !strings.Contains(page, "No partition claimed: the group has not joined.") ||
		!strings.Contains(page, `<span class="bad" id="ready">not ready</span>`) {
		t.Fatalf("/ before the join: %d\n%s", code, page)
	}
}
