package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/loadgen"
)

// timedEndpoint answers every request after a fixed delay and times the
// run from the first request's arrival to the last response.
type timedEndpoint struct {
	delay       time.Duration
	mu          sync.Mutex
	first, last time.Time
	n           atomic.Int64
}

func (e *timedEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	e.mu.Lock()
	if e.first.IsZero() {
		e.first = start
	}
	e.mu.Unlock()
	buf := make([]byte, 512)
	for {
		if _, err := r.Body.Read(buf); err != nil {
			break
		}
	}
	time.Sleep(e.delay)
	e.n.Add(1)
	end := time.Now()
	e.mu.Lock()
	if end.After(e.last) {
		e.last = end
	}
	e.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (e *timedEndpoint) reset() {
	e.mu.Lock()
	e.first, e.last = time.Time{}, time.Time{}
	e.mu.Unlock()
	e.n.Store(0)
}

// rate is the requests per second from the first arrival to the last
// response.
func (e *timedEndpoint) rate() float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return float64(e.n.Load()) / e.last.Sub(e.first).Seconds()
}

// TestConsumeBench (ORDERLY_BENCH=1) measures `orderly consume --http
// --num 64 --size 1` against an endpoint that takes 5 ms per request, side
// by side with its limit: 64 plain goroutines POSTing the same records
// (read from the topic beforehand) with the same headers through a
// keep-alive pool of 64. Both are timed by the endpoint, from the first
// request to the last response (the group join is not counted), over
// ORDERLY_BENCH_RECORDS records (60000: about 5 s a run); rounds
// alternate which contender goes first. Target: consume at least 0.9x of
// the limit.
func TestConsumeBench(t *testing.T) {
	if os.Getenv("ORDERLY_BENCH") == "" {
		t.Skip("ORDERLY_BENCH=1 runs the consume --http benchmark")
	}
	n := 60000
	if v, err := strconv.Atoi(os.Getenv("ORDERLY_BENCH_RECORDS")); err == nil && v > 0 {
		n = v
	}
	rounds := 5
	if v, err := strconv.Atoi(os.Getenv("ORDERLY_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	const num = 64
	b := newTopic(t, "bench", 8)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := loadgen.Produce(ctx, b.Addrs(), "bench", n, func(i int) loadgen.Record {
		return loadgen.Record{Key: fmt.Appendf(nil, "key-%05d", i%10000), Value: bytes.Repeat([]byte{'x'}, 100)}
	}); err != nil {
		t.Fatal(err)
	}
	ep := &timedEndpoint{delay: 5 * time.Millisecond}
	srv := httptest.NewServer(ep)
	defer srv.Close()

	cpu := func(ps *os.ProcessState) float64 {
		return float64(ps.UserTime()+ps.SystemTime()) / float64(time.Microsecond) / float64(n)
	}
	var consumeCPU, limitCPU []float64
	runConsume := func(round int) float64 {
		ep.reset()
		p := startConsume(t, "--brokers", b.Addrs()[0], "--topic", "bench", "--group", fmt.Sprintf("bench-%d", round),
			"--http", srv.URL, "--num", strconv.Itoa(num), "--size", "1", "--progress", "off", "--log-level", "error")
		p.waitFor(3*time.Minute, "every record at the endpoint", func() bool { return ep.n.Load() >= int64(n) })
		if code := p.stop(syscall.SIGTERM); code != 0 {
			t.Fatalf("consume exit %d\n%s", code, p.output())
		}
		consumeCPU = append(consumeCPU, cpu(p.cmd.ProcessState))
		return ep.rate()
	}
	runLimit := func() float64 {
		ep.reset()
		// In a process of its own, as consume is: on a loaded machine a
		// client sharing the endpoint's process (and its GOMAXPROCS)
		// would get less CPU than one beside it.
		cmd := exec.Command(os.Args[0], "-test.run=^TestConsumeBenchLimit$", "-test.count=1")
		cmd.Env = append(os.Environ(), "ORDERLY_BENCH_LIMIT_URL="+srv.URL, "ORDERLY_BENCH_LIMIT_BROKERS="+b.Addrs()[0],
			"ORDERLY_BENCH_LIMIT_NUM="+strconv.Itoa(num))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("limit: %v\n%s", err, out)
		}
		if got := ep.n.Load(); got != int64(n) {
			t.Fatalf("limit posted %d records, want %d", got, n)
		}
		limitCPU = append(limitCPU, cpu(cmd.ProcessState))
		return ep.rate()
	}
	var ratios, consumeRates, limitRates []float64
	for r := range rounds {
		var c, l float64
		if r%2 == 0 {
			c, l = runConsume(r), runLimit()
		} else {
			l, c = runLimit(), runConsume(r)
		}
		ratios, consumeRates, limitRates = append(ratios, c/l), append(consumeRates, c), append(limitRates, l)
		t.Logf("round %d: consume %.0f req/s (%.0f µs CPU/request), limit %.0f req/s (%.0f µs): %.3fx",
			r, c, consumeCPU[len(consumeCPU)-1], l, limitCPU[len(limitCPU)-1], c/l)
	}
	med := median(ratios)
	t.Logf("consume --http --num %d --size 1, 5 ms endpoint, %d records, %d rounds: median %.3fx of the limit (min %.3fx, max %.3fx); "+
		"consume median %.0f req/s and %.0f µs CPU/request (its process: Kafka and HTTP), limit median %.0f req/s and %.0f µs (its process: HTTP; reading the records first included)",
		num, n, rounds, med, slices.Min(ratios), slices.Max(ratios), median(consumeRates), median(consumeCPU), median(limitRates), median(limitCPU))
	if med < 0.9 {
		t.Errorf("median ratio %.3fx, want at least 0.9x of the limit", med)
	}
}

// TestConsumeBenchLimit is TestConsumeBench's limit, run in a process of
// its own: it reads every record of the topic "bench" from
// ORDERLY_BENCH_LIMIT_BROKERS, then POSTs them to ORDERLY_BENCH_LIMIT_URL
// with ORDERLY_BENCH_LIMIT_NUM goroutines.
func TestConsumeBenchLimit(t *testing.T) {
	url := os.Getenv("ORDERLY_BENCH_LIMIT_URL")
	if url == "" {
		t.Skip("run by TestConsumeBench")
	}
	num, err := strconv.Atoi(os.Getenv("ORDERLY_BENCH_LIMIT_NUM"))
	if err != nil {
		t.Fatal(err)
	}
	recs := readAllRecords(t, []string{os.Getenv("ORDERLY_BENCH_LIMIT_BROKERS")}, "bench")
	postAll(t, url, recs, num)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// readAllRecords reads every record of topic, partition by partition.
func readAllRecords(t *testing.T, addrs []string, topic string) []*group.Message {
	t.Helper()
	c, err := sarama.NewConsumer(addrs, group.DefaultSarama())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	parts, err := c.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := sarama.NewClient(addrs, group.DefaultSarama())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*group.Message
	for _, p := range parts {
		hw, err := cl.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		if hw == 0 {
			continue
		}
		pc, err := c.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		for m := range pc.Messages() {
			out = append(out, &group.Message{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset,
				Key: m.Key, Value: m.Value, Timestamp: m.Timestamp, Attempt: 1})
			if m.Offset == hw-1 {
				break
			}
		}
		pc.Close()
	}
	return out
}

// postAll POSTs every record with num goroutines, as consume --size 1
// does (raw body, Kafka-* headers), through a keep-alive pool of num.
func postAll(t *testing.T, url string, recs []*group.Message, num int) {
	t.Helper()
	tr := &http.Transport{MaxIdleConns: num, MaxIdleConnsPerHost: num, MaxConnsPerHost: num}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, num)
	for range num {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(recs)) {
					return
				}
				m := recs[i]
				req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(m.Value))
				if err != nil {
					errs <- err
					return
				}
				req.Header.Set("Content-Type", "application/octet-stream")
				setKafkaHeaders(req.Header, m)
				resp, err := client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
