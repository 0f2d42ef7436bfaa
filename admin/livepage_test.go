package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"golang.org/x/net/html"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/browsertest"
)

// startServed starts a broker with topic (parts partitions), a group on
// it whose Do returns nil (cfg may change its Config), and the admin
// server in front of it; Run is not started (run starts it).
func startServed(t *testing.T, topic string, parts int32, cfg func(*group.Config)) *live {
	t.Helper()
	b, err := broker.Start(broker.Config{Topics: []string{topic}, Partitions: parts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	sc := group.DefaultSarama()
	sc.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	c := group.Config{
		Brokers: b.Addrs(), Topics: []string{topic}, GroupID: topic, Sarama: sc, Size: 1, Num: 2,
		Logger: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)),
	}
	if cfg != nil {
		cfg(&c)
	}
	g, err := group.New(c, group.Handler[*group.Message]{Do: func(context.Context, []*group.Message) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &live{t: t, b: b, g: g, topic: topic, base: "http://" + ln.Addr().String() + "/", release: func() {}}
	serveCtx, stopServe := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ServeListener(serveCtx, ln, g, Options{}) }()
	l.stopServe = func() error { stopServe(); return <-served }
	t.Cleanup(func() {
		if l.stopRun != nil {
			_ = l.stopRun()
		}
		stopServe()
		<-served
	})
	return l
}

// produceAged writes n records to topic, record i with a timestamp age(i)
// ago.
func produceAged(t *testing.T, addrs []string, topic string, n int, age func(i int) time.Duration) {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_0_0_0
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForLocal
	p, err := sarama.NewSyncProducer(addrs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	now := time.Now()
	for i := range n {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(fmt.Sprint("k", i)),
			Value: sarama.StringEncoder(fmt.Sprint("v", i)), Timestamp: now.Add(-age(i))}); err != nil {
			t.Fatal(err)
		}
	}
}

// waitFor polls cond every 20ms until it holds, or fails the test after
// timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not %s after %v", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLiveQuantileAboveLastBound: a consumer catching up on records 1 to 8
// minutes old has every end-to-end latency above the histogram's last
// bound (60s). /stats says so in a form a program tells apart (p50 and
// p99 stay the last bound, "1m0s", with p50_above_last_bound and
// p99_above_last_bound true), and the status page, as Chromium builds
// it, shows ">1m0s / >1m0s" rather than a latency of one minute. The Do
// durations, under a second, are not marked.
func TestLiveQuantileAboveLastBound(t *testing.T) {
	const n = 40
	l := startServed(t, "admin-aged", 2, nil)
	produceAged(t, l.b.Addrs(), l.topic, n, func(i int) time.Duration { return time.Minute + time.Second + time.Duration(i)*10*time.Second })
	l.run()
	waitFor(t, time.Minute, "every record handled", func() bool { return l.g.Stats().Latency.Count == n })

	code, body := l.get("stats")
	if code != 200 {
		t.Fatalf("/stats: %d %s", code, body)
	}
	// Decoded by name, as a program reading the JSON would.
	type quantiles struct {
		P50      string `json:"p50"`
		P99      string `json:"p99"`
		P50Above *bool  `json:"p50_above_last_bound"`
		P99Above *bool  `json:"p99_above_last_bound"`
	}
	var doc struct {
		Lat quantiles `json:"end_to_end_latency"`
		Do  quantiles `json:"handler_duration"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	is := func(b *bool, want bool) bool { return b != nil && *b == want }
	if lat := doc.Lat; lat.P50 != "1m0s" || lat.P99 != "1m0s" || !is(lat.P50Above, true) || !is(lat.P99Above, true) {
		t.Errorf("/stats end_to_end_latency: got p50 %q p99 %q above %s %s; want \"1m0s\" (the last bound, still a duration) with p50_above_last_bound and p99_above_last_bound true",
			lat.P50, lat.P99, boolPtr(lat.P50Above), boolPtr(lat.P99Above))
	}
	if do := doc.Do; !is(do.P50Above, false) || !is(do.P99Above, false) {
		t.Errorf("/stats handler_duration: got p50 %q p99 %q above %s %s; want p50_above_last_bound and p99_above_last_bound false (calls under a second)",
			do.P50, do.P99, boolPtr(do.P50Above), boolPtr(do.P99Above))
	}

	root := browsertest.DOM(t, browsertest.Chromium(t), l.base) // /stats is checked without a browser too
	if got := cardValue(root, "end-to-end latency p50 / p99"); got != ">1m0s / >1m0s" {
		t.Errorf("the page's end-to-end latency p50 / p99: got %q, want \">1m0s / >1m0s\"", got)
	}
	if got := cardValue(root, "Do duration p50 / p99"); strings.Contains(got, ">") || got == "<missing>" {
		t.Errorf("the page's Do duration p50 / p99: got %q, want bucket bounds without \">\"", got)
	}
}

func boolPtr(b *bool) string {
	if b == nil {
		return "absent"
	}
	return fmt.Sprint(*b)
}

// cardValue is the value the status page shows on the card labelled
// label.
func cardValue(root *html.Node, label string) string {
	card := browsertest.Find(root, func(n *html.Node) bool {
		k := browsertest.Find(n, browsertest.ByClass("k"))
		return browsertest.Attr(n, "class") == "card" && k != nil && browsertest.Text(k) == label
	})
	if v := browsertest.Find(card, browsertest.ByClass("v")); v != nil {
		return browsertest.Text(v)
	}
	return "<missing>"
}

// TestLivePageNotReadyAfterBrokerOutage: a real group on kfake joins and
// claims its partitions; then the broker goes away (closed), the group
// loses its claims and cannot rejoin: not ready, no partition claimed.
// /stats keeps the documented status (OK with no partitions, code 1) and
// says ready false; the status page, as Chromium builds it, must not say
// green "OK, every claimed partition is OK" nor that the group "has not
// joined": its banner says NOT READY, out of the group, and the
// partitions section that the group had joined and held partitions.
func TestLivePageNotReadyAfterBrokerOutage(t *testing.T) {
	bin := browsertest.Chromium(t)
	const parts = 3
	l := startServed(t, "admin-outage", parts, func(c *group.Config) {
		c.Sarama.Consumer.Group.Session.Timeout = 6 * time.Second
		c.Sarama.Consumer.Group.Heartbeat.Interval = 200 * time.Millisecond
		c.Sarama.Consumer.Group.Rebalance.Timeout = 4 * time.Second
		c.Sarama.Net.DialTimeout, c.Sarama.Net.ReadTimeout = time.Second, 2*time.Second
		c.Sarama.Metadata.Retry.Max = 1
		c.Retry = group.Retry{Backoff: 200 * time.Millisecond, MaxBackoff: time.Second}
		c.Logger = zap.NewNop() // the outage's warnings are expected
	})
	l.run()
	waitFor(t, 30*time.Second, "ready with every partition claimed", func() bool {
		return l.g.Ready() && l.g.Stats().Partitions == parts
	})
	joined := browsertest.DOM(t, bin, l.base)
	if banner := browsertest.Text(browsertest.Find(joined, browsertest.ByID("group-status"))); !strings.Contains(banner, "every claimed partition is OK") {
		t.Fatalf("the banner while joined: got %q, want OK over its partitions", banner)
	}

	l.b.Close() // the outage
	waitFor(t, time.Minute, "not ready with no partition claimed", func() bool {
		d := l.stats()
		return d.Ready != nil && !*d.Ready && d.Now.Partitions == 0
	})
	d := l.stats()
	if d.Status.Code != 1 || d.Status.Name != "OK" || d.Totals.Claims < parts {
		t.Errorf("/stats during the outage: got status %+v, claims %d; want OK (code 1, as documented: no partition is worse) and at least %d claims", d.Status, d.Totals.Claims, parts)
	}

	root := browsertest.DOM(t, bin, l.base)
	banner := browsertest.Find(root, browsertest.ByID("group-status"))
	if banner == nil {
		t.Fatal("no banner (#group-status)")
	}
	text := browsertest.Text(banner)
	if strings.Contains(browsertest.Attr(banner, "class"), "st-1") || strings.Contains(text, "every claimed partition is OK") ||
		!strings.HasPrefix(text, "NOT READY") || !strings.Contains(text, "out of the group") && !strings.Contains(text, "group session lost") {
		t.Errorf("the banner during the outage: got %q (class %q), want NOT READY, out of the group or its session lost, not a green OK", text, browsertest.Attr(banner, "class"))
	}
	if title := browsertest.Find(root, func(n *html.Node) bool { return n.Data == "title" }); title == nil || !strings.HasPrefix(browsertest.Text(title), "NOT READY") {
		t.Errorf("the page's title during the outage: want it to start NOT READY")
	}
	section := browsertest.Text(browsertest.Find(root, browsertest.ByID("partitions")))
	if strings.Contains(section, "not joined yet") || !strings.Contains(section, "not ready: out of the group") && !strings.Contains(section, "not ready: group session lost") {
		t.Errorf("the partitions section during the outage: got %q, want the group's reason (out of the group, or its session lost), not that it has not joined yet", section)
	}
}
