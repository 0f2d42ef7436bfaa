package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/broker"
	"github.com/orderly-go/orderly/internal/loadgen"
)

// live is a real group on kfake with the admin server in front of it on
// loopback.
type live struct {
	t       *testing.T
	b       *broker.Broker
	g       *group.Group[*group.Message]
	base    string // http://127.0.0.1:port/
	topic   string
	release func() // lets the stuck call return

	stopRun   func() error
	stopServe func() error
}

// startProduced starts a broker with topic (parts partitions) holding n
// messages over keys keys ("key-i%keys", "value i").
func startProduced(t *testing.T, topic string, parts int32, n, keys int) *broker.Broker {
	t.Helper()
	b, err := broker.Start(broker.Config{Topics: []string{topic}, Partitions: parts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := loadgen.Produce(ctx, b.Addrs(), topic, n, func(i int) loadgen.Record {
		return loadgen.Record{Key: fmt.Appendf(nil, "key-%d", i%keys), Value: fmt.Appendf(nil, "value %d", i)}
	}); err != nil {
		t.Fatal(err)
	}
	return b
}

// startLive starts a broker with topic (parts partitions, n messages over
// keys keys), a group on it whose Do sticks once at partition 0 offset 10
// (ignoring its ctx: MsgTimeout is 200ms, so its worker is stuck after
// MsgTimeout and the 1s grace) until release, and fails partition 1's
// offset 20 every time (dead-lettered to the local store after 2
// attempts); and the admin server. Run is not started.
func startLive(t *testing.T, topic string, parts int32, n, keys int) *live {
	t.Helper()
	b := startProduced(t, topic, parts, n, keys)
	sc := group.DefaultSarama()
	sc.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	release := make(chan struct{})
	var once sync.Once
	var stuckOnce atomic.Bool
	g, err := group.New(group.Config{
		Brokers: b.Addrs(), Topics: []string{topic}, GroupID: topic, Sarama: sc,
		Size: 1, Num: 4, MsgTimeout: 200 * time.Millisecond,
		Retry:    group.Retry{Backoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, MaxAttempts: 2},
		DataPath: t.TempDir(),
		Status:   group.StatusConfig{Window: 5, StuckHead: 300 * time.Millisecond, ReadBack: 200 * time.Millisecond},
		Logger:   zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
	}, group.Handler[*group.Message]{Do: func(ctx context.Context, batch []*group.Message) error {
		m := batch[0]
		switch {
		case m.Partition == 0 && m.Offset == 10 && !stuckOnce.Swap(true):
			<-release // ignores ctx: stuck past MsgTimeout and its grace
			return ctx.Err()
		case m.Partition == 1 && m.Offset == 20:
			return errors.New("offset 20 of partition 1 always fails")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &live{t: t, b: b, g: g, topic: topic, base: "http://" + ln.Addr().String() + "/",
		release: func() { once.Do(func() { close(release) }) }}
	serveCtx, stopServe := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ServeListener(serveCtx, ln, g, Options{}) }()
	l.stopServe = func() error { stopServe(); return <-served }
	t.Cleanup(func() {
		l.release()
		if l.stopRun != nil {
			_ = l.stopRun()
		}
		stopServe()
	})
	return l
}

// run starts Run; stopRun cancels it and returns its error.
func (l *live) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.g.Run(ctx) }()
	var once sync.Once
	var err error
	l.stopRun = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
}

// get GETs path and returns the status and body.
func (l *live) get(path string) (int, string) {
	l.t.Helper()
	resp, err := http.Get(l.base + path)
	if err != nil {
		l.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		l.t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

// waitCode polls path until it answers code.
func (l *live) waitCode(path string, code int, timeout time.Duration) string {
	l.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, body := l.get(path)
		if got == code {
			return body
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("/%s: got %d %q for %v, want %d", path, got, body, timeout, code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (l *live) stats() *StatsDoc {
	l.t.Helper()
	code, body := l.get("stats")
	if code != http.StatusOK {
		l.t.Fatalf("/stats: %d %s", code, body)
	}
	var d StatsDoc
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		l.t.Fatalf("decode /stats: %v\n%s", err, body)
	}
	return &d
}

// waitQuiet waits until the group has nothing left to do but the stuck
// call: partition 0's frontier held at offset 10 and read back as
// committed there, the dead letter written, every other partition
// committed to its end, and two snapshots 300ms apart alike.
func (l *live) waitQuiet(timeout time.Duration) {
	l.t.Helper()
	hw := l.b.HighWatermarks(l.topic)
	deadline := time.Now().Add(timeout)
	var prev string
	for {
		s := l.g.Stats()
		done := len(s.PartitionStats) == len(hw) && s.DeadLettered.MaxAttempts == 1
		for _, p := range s.PartitionStats {
			want := hw[p.Partition]
			if p.Partition == 0 {
				want = 10
			}
			done = done && p.Frontier == want && p.Committed == want
		}
		key := fmt.Sprint(s.Handled, s.Lag, s.DeadLettered, s.Retries, s.InFlight)
		if done && key == prev {
			return
		}
		prev = key
		if time.Now().After(deadline) {
			l.t.Fatalf("not quiet after %v: %+v", timeout, s.PartitionStats)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// TestLive runs the admin server in front of a real group and checks each
// endpoint through its life: /readyz 503 before the join, 200 once
// joined, 503 after Run returned; /healthz 503 while a worker is stuck
// past MsgTimeout and its grace, 200 once the call returns; /metrics
// parsed with expfmt, every documented metric present with its documented
// labels and values consistent with Stats snapshots taken around the
// scrape; every metric the dashboard and the alert rules name present;
// /stats decoded.
func TestLive(t *testing.T) {
	const parts, n = 4, 2000
	l := startLive(t, "admin-live", parts, n, 40)
	if body := l.waitCode("readyz", http.StatusServiceUnavailable, time.Second); !strings.HasPrefix(body, "not ready: not joined yet") {
		t.Fatalf("/readyz before Run: got %q, want 'not ready: not joined yet'", body)
	}
	l.waitCode("healthz", http.StatusOK, time.Second) // nothing stuck yet

	l.run()
	l.waitCode("readyz", http.StatusOK, 30*time.Second)
	why := l.waitCode("healthz", http.StatusServiceUnavailable, 30*time.Second)
	if !strings.Contains(why, "1 workers stuck in Do past MsgTimeout (200ms)") {
		t.Fatalf("/healthz while stuck: got %q, want it to name 1 stuck worker", why)
	}
	l.waitQuiet(time.Minute)

	t.Run("stats while stuck", func(t *testing.T) {
		d := l.stats()
		if d.ConsumerGroup != l.topic || d.Now.StuckWorkers != 1 || *d.Live || !*d.Ready || len(d.Partitions) != parts {
			t.Fatalf("/stats: got group %q stuck %d live %v ready %v partitions %d", d.ConsumerGroup, d.Now.StuckWorkers,
				*d.Live, *d.Ready, len(d.Partitions))
		}
		stuck := 0
		for _, w := range d.Workers {
			if w.Stuck {
				stuck++
				if age, err := time.ParseDuration(w.BatchAge); err != nil || age < 200*time.Millisecond {
					t.Errorf("stuck worker's batch_age %q: want a duration of at least 200ms (%v)", w.BatchAge, err)
				}
			}
		}
		p0 := d.Partitions[0]
		if stuck != 1 || p0.Partition != 0 || p0.Frontier != 10 || p0.Committed != 10 || p0.InFlight == 0 || p0.CommittedAt == nil {
			t.Fatalf("/stats: got %d stuck workers, partition 0 %+v; want 1, frontier and committed 10, in flight", stuck, p0)
		}
		if d.DeadLetters.ByReason["max_attempts"] != 1 || !strings.HasPrefix(d.DeadLetters.Destination, "local:") {
			t.Fatalf("/stats dead letters: got %+v, want 1 max_attempts to local:", d.DeadLetters)
		}
	})

	t.Run("metrics consistent with Stats", func(t *testing.T) {
		before := l.g.Stats()
		sc := scrapeURL(t, l.base+"metrics")
		after := l.g.Stats()
		checkDocumented(t, sc)
		checkAround(t, sc, &before, &after)
		if got := sc.value(t, "orderly_workers_stuck"); got != 1 {
			t.Errorf("orderly_workers_stuck: got %v, want 1", got)
		}
		if got := sc.value(t, "orderly_live"); got != 0 {
			t.Errorf("orderly_live while stuck: got %v, want 0", got)
		}
		if got := sc.value(t, "orderly_consumergroup_current_offset", pl(l.topic, 0)...); got != 10 {
			t.Errorf("current offset of the stuck partition: got %v, want 10", got)
		}
		dest := "local:" + strings.TrimPrefix(before.DeadLetterDestination, "local:")
		if got := sc.value(t, "orderly_dead_letters_total", "reason=max_attempts", "destination="+dest); got != 1 {
			t.Errorf("dead letters: got %v, want 1", got)
		}
		if got := sc.value(t, "orderly_records_total", pl(l.topic, 1, "outcome=dead_lettered")...); got != 1 {
			t.Errorf("dead-lettered records of partition 1: got %v, want 1", got)
		}
	})

	t.Run("deploy metrics exist", func(t *testing.T) {
		checkDeploy(t, scrapeURL(t, l.base+"metrics"))
	})

	l.release()
	l.waitCode("healthz", http.StatusOK, 30*time.Second)
	waitCaughtUp(t, l.b, l.topic, time.Minute)
	if err := l.stopRun(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if body := l.waitCode("readyz", http.StatusServiceUnavailable, time.Second); !strings.HasPrefix(body, "not ready: stopped: Run returned") {
		t.Fatalf("/readyz after Run: got %q, want 'not ready: stopped: Run returned'", body)
	}
	if err := l.stopServe(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// TestLiveReadyzWhileStopping: /readyz answers 503 from the moment Run's
// ctx ends, while the group drains (here a Do that ignores its ctx holds
// the drain until released) and before Run returns, and never 200 again;
// orderly_ready and /stats' ready agree. Before, /readyz stayed 200 for
// the whole drain (consume's SIGTERM drain showed it for seconds).
func TestLiveReadyzWhileStopping(t *testing.T) {
	l := startLive(t, "admin-stopping", 2, 200, 20)
	l.run()
	l.waitCode("readyz", http.StatusOK, 30*time.Second)
	l.waitCode("healthz", http.StatusServiceUnavailable, 30*time.Second) // the call hangs: the drain will wait on it

	stopped := make(chan error, 1)
	go func() { stopped <- l.stopRun() }()
	// Poll as a prober would, every 2ms, until Run has returned.
	var codes []int
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := l.get("readyz")
		codes = append(codes, code)
		if code == http.StatusServiceUnavailable {
			if !strings.HasPrefix(body, "not ready: stopping") {
				t.Errorf("/readyz while stopping: got %q, want 'not ready: stopping...'", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d 5s after Run's ctx ended, while the group drains (codes %v)", code, codes[max(0, len(codes)-5):])
		}
		time.Sleep(2 * time.Millisecond)
	}
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) before the hung call was released: the test needs it still draining", err)
	default:
	}
	if d := l.stats(); d.Ready == nil || *d.Ready {
		t.Errorf("/stats ready while stopping: got %v, want false", d.Ready)
	}
	if got := scrapeURL(t, l.base+"metrics").value(t, "orderly_ready"); got != 0 {
		t.Errorf("orderly_ready while stopping: got %v, want 0", got)
	}
	for i := 0; i < 50; i++ { // 100ms more of the drain: never ready again
		if code, _ := l.get("readyz"); code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz during the drain, after a 503: got %d", code)
		}
		time.Sleep(2 * time.Millisecond)
	}
	l.release()
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}
	l.waitCode("readyz", http.StatusServiceUnavailable, time.Second)
	if err := l.stopServe(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

func waitCaughtUp(t *testing.T, b *broker.Broker, topic string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !b.CaughtUp(topic, topic) {
		if time.Now().After(deadline) {
			t.Fatalf("committed offsets of %s short of the high watermarks after %v", topic, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkAround checks a scrape against the snapshots taken just before
// and just after it: counters between the two, gauges equal where both
// snapshots agree.
func checkAround(t *testing.T, sc scrape, before, after *group.Stats) {
	t.Helper()
	if len(before.PartitionStats) != len(after.PartitionStats) {
		t.Fatalf("partitions changed during the scrape: %d then %d", len(before.PartitionStats), len(after.PartitionStats))
	}
	between := func(what string, got float64, lo, hi int64) {
		if got < float64(lo) || got > float64(hi) {
			t.Errorf("%s: got %v, want between %d and %d (Stats before and after the scrape)", what, got, lo, hi)
		}
	}
	for i := range before.PartitionStats {
		b, a := &before.PartitionStats[i], &after.PartitionStats[i]
		lbl := func(more ...string) []string { return pl(b.Topic, b.Partition, more...) }
		between(fmt.Sprintf("%s/%d handled", b.Topic, b.Partition), sc.value(t, "orderly_records_total", lbl("outcome=handled")...),
			b.Outcomes.Handled, a.Outcomes.Handled)
		between(fmt.Sprintf("%s/%d dead-lettered", b.Topic, b.Partition), sc.value(t, "orderly_records_total", lbl("outcome=dead_lettered")...),
			b.Outcomes.DeadLettered, a.Outcomes.DeadLettered)
		between(fmt.Sprintf("%s/%d failed attempts", b.Topic, b.Partition), sc.value(t, "orderly_failed_attempts_total", lbl()...),
			b.Outcomes.FailedAttempts, a.Outcomes.FailedAttempts)
		for _, g := range []struct {
			name     string
			bef, aft int64
		}{
			{"orderly_consumergroup_lag", b.Lag, a.Lag},
			{"orderly_partition_high_watermark", b.HighWatermark, a.HighWatermark},
			{"orderly_partition_frontier_offset", b.Frontier, a.Frontier},
			{"orderly_consumergroup_current_offset", b.Committed, a.Committed},
			{"orderly_inflight_records", b.InFlight, a.InFlight},
			{"orderly_partition_status", int64(b.Status.Code), int64(a.Status.Code)},
			{"orderly_finished_above_frontier_records", b.FinishedAbove, a.FinishedAbove},
			{"orderly_commit_metadata_bytes", int64(b.MetadataBytes), int64(a.MetadataBytes)},
		} {
			if g.bef != g.aft {
				continue // changed around the scrape: nothing to compare
			}
			if got := sc.value(t, g.name, lbl()...); got != float64(g.bef) {
				t.Errorf("%s{%s/%d}: got %v, want %d (Stats before and after)", g.name, b.Topic, b.Partition, got, g.bef)
			}
		}
		if got := sc.value(t, "orderly_oldest_unfinished_age_seconds", lbl()...); got < b.OldestUnfinished.Seconds() ||
			(a.OldestUnfinished > 0 && got > a.OldestUnfinished.Seconds()) {
			t.Errorf("oldest unfinished of %s/%d: got %vs, want between %v and %v", b.Topic, b.Partition, got, b.OldestUnfinished, a.OldestUnfinished)
		}
	}
	between("fetched", sc.value(t, "orderly_fetched_records_total"), before.Fetched, after.Fetched)
	between("retries", sc.value(t, "orderly_retries_total"), before.Retries, after.Retries)
	between("calls ok", sc.value(t, "orderly_handler_calls_total", "result=ok"), before.Batches, after.Batches)
	between("calls failed", sc.value(t, "orderly_handler_calls_total", "result=error"), before.Failures, after.Failures)
	between("calls deferred", sc.value(t, "orderly_handler_calls_total", "result=deferred"), before.DeferredCalls, after.DeferredCalls)
	between("timeouts", sc.value(t, "orderly_handler_timeouts_total"), before.TimedOut, after.TimedOut)
	between("claims", sc.value(t, "orderly_rebalances_total"), before.Claims, after.Claims)
	ms := sc.find("orderly_handler_duration_seconds")
	if len(ms) != 1 {
		t.Fatalf("orderly_handler_duration_seconds: %d series", len(ms))
	}
	if c := ms[0].GetHistogram().GetSampleCount(); c < before.DoDuration.Count || c > after.DoDuration.Count {
		t.Errorf("handler duration count: got %d, want between %d and %d", c, before.DoDuration.Count, after.DoDuration.Count)
	}
	if got := sc.value(t, "orderly_partitions_claimed"); got != float64(before.Partitions) {
		t.Errorf("partitions claimed: got %v, want %d", got, before.Partitions)
	}
}
