package admin

import (
	"html"
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

// TestStatusPageEmpty: before the join, no partitions and no workers;
// the banner says NOT READY, not OK.
func TestStatusPageEmpty(t *testing.T) {
	f := &fakeGroup{s: group.Stats{GroupID: "idle", Status: group.PartitionStatus{Code: group.StatusOK}}, live: true}
	code, page := get(t, Handler(f, Options{}), "GET", "/")
	if code != 200 || !strings.Contains(page, `<p class="muted" id="no-partitions">No partition claimed: not ready: not in the group: not joined yet, or joined with no partitions and since left or stopping.</p>`) ||
		!strings.Contains(page, `<span class="bad" id="ready">not ready</span>`) ||
		!strings.Contains(page, `<div class="banner notready" id="group-status">
<span class="code">NOT READY</span><span class="reason">not in the group: not joined yet, or joined with no partitions and since left or stopping; no partition claimed</span>`) {
		t.Fatalf("/ before the join: %d\n%s", code, page)
	}
}

// TestStatusPageNotReady: the banner and the partitions section say what
// Ready, Live and Stats tell of a group that is not ready; a ready group
// and a status worse than OK keep the status as the banner.
func TestStatusPageNotReady(t *testing.T) {
	noParts := func(claims int64) group.Stats {
		return group.Stats{GroupID: "g", Claims: claims, Revokes: claims, Status: group.PartitionStatus{Code: group.StatusOK}}
	}
	for _, c := range []struct {
		name             string
		s                group.Stats
		ready, live      bool
		why              string
		banner, sections string
	}{
		{"standby", noParts(0), true, true, "",
			`<div class="banner st-1" id="group-status">
<span class="code">OK</span><span class="reason">every claimed partition is OK</span>`,
			"No partition claimed: the group joined and assigned this member none (more members than partitions)."},
		{"out of the group after holding partitions", noParts(4), false, true, "",
			`<div class="banner notready" id="group-status">
<span class="code">NOT READY</span><span class="reason">out of the group after 4 partition claims: its session lost, a rejoin failing, or stopping; no partition claimed</span>`,
			"No partition claimed: not ready: out of the group after 4 partition claims: its session lost, a rejoin failing, or stopping."},
		{"session lost for long", noParts(0), false, false, "group session lost 1m0s ago",
			`<span class="code">NOT READY</span><span class="reason">group session lost 1m0s ago; no partition claimed</span>`,
			"No partition claimed: not ready: group session lost 1m0s ago."},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, page := get(t, Handler(&fakeGroup{s: c.s, ready: c.ready, live: c.live, why: c.why}, Options{}), "GET", "/")
			if !strings.Contains(page, c.banner) || !strings.Contains(page, `id="no-partitions">`+c.sections+`</p>`) {
				t.Fatalf("want the banner\n%s\nand the partitions section %q; got\n%s", c.banner, c.sections, page)
			}
		})
	}
	// Partitions still held (draining for shutdown, say), all OK: NOT
	// READY; one STALLed: STALL stays the banner.
	f := &fakeGroup{s: sampleStats(), ready: false, live: true}
	f.set(func(s *group.Stats) {
		s.PartitionStats[1].Status = group.PartitionStatus{Code: group.StatusOK}
		s.Status = group.PartitionStatus{Code: group.StatusOK}
	})
	if _, page := get(t, Handler(f, Options{}), "GET", "/"); !strings.Contains(page,
		`<span class="code">NOT READY</span><span class="reason">its session lost, a rejoin failing, or stopping; the 2 partitions it still holds are OK</span>`) ||
		!strings.Contains(page, "<title>NOT READY · ledger · orderly</title>") {
		t.Errorf("not ready, holding OK partitions: got\n%s", page)
	}
	// A group that says why (Readiness): its reason is the banner's, on
	// the page, in /stats and in /readyz's answer.
	stopping := "stopping: Run's ctx ended (or an error it cannot get past); its partitions drain"
	rf := &fakeGroup{s: noParts(0), ready: false, live: true}
	rf.s.PartitionStats = sampleStats().PartitionStats[:1]
	rf.s.PartitionStats[0].Status = group.PartitionStatus{Code: group.StatusOK}
	rg := reasonedGroup{rf, stopping}
	if _, page := get(t, Handler(rg, Options{}), "GET", "/"); !strings.Contains(page,
		`<span class="code">NOT READY</span><span class="reason">`+html.EscapeString(stopping)+`; the partition it still holds is OK</span>`) ||
		!strings.Contains(page, `<span class="bad" id="ready">not ready</span>: `+html.EscapeString(stopping)) {
		t.Errorf("not ready, with the group's reason: got\n%s", page)
	}
	if code, body := get(t, Handler(rg, Options{}), "GET", "/readyz"); code != 503 || !strings.Contains(body, "not ready: "+stopping) {
		t.Errorf("/readyz: got %d %q, want 503 with the group's reason", code, body)
	}
	if _, body := get(t, Handler(rg, Options{}), "GET", "/stats"); !strings.Contains(body, `"ready_reason": "`+stopping+`"`) && !strings.Contains(body, `"ready_reason":"`+stopping+`"`) {
		t.Errorf("/stats: no ready_reason %q in\n%s", stopping, body)
	}
	f = &fakeGroup{s: sampleStats(), ready: false, live: true}
	if _, page := get(t, Handler(f, Options{}), "GET", "/"); !strings.Contains(page, `<div class="banner st-5" id="group-status">
<span class="code">STALL</span>`) {
		t.Errorf("not ready with a partition STALLed: want the STALL banner; got\n%s", page)
	}
}
