package admin

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/broker"
)

// BenchmarkScrape1000 is the cost of looking at a running group with
// 1,000 claimed partitions (kfake, sarama), per call. Stats: one snapshot
// (what group/stats_bench_test.go measures). Gather: a registry holding
// only Collector(g) gathered, one Stats and the const metrics built from
// it (about 17,000 series). Scrape: Gather plus the text encoding
// (expfmt), what one Prometheus scrape of the collector costs the
// process. HTTP: GET /metrics of Handler over loopback (its default
// registry: the collector and the Go and process collectors; gzip, as
// Go's client and Prometheus ask for it), the body read.
//
//	go test ./admin -run '^$' -bench Scrape -benchtime 50x
func BenchmarkScrape1000(b *testing.B) { benchScrape(b, 1000) }

// BenchmarkScrape8 is BenchmarkScrape1000 with the 8 partitions of
// `orderly bench`'s data sets: what one scrape adds to TestScrapeCost's
// runs (internal/bench).
func BenchmarkScrape8(b *testing.B) { benchScrape(b, 8) }

func benchScrape(b *testing.B, parts int) {
	br, err := broker.Start(broker.Config{Topics: []string{"scrape"}, Partitions: int32(parts)})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	sc := group.DefaultSarama()
	sc.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	g, err := group.New(group.Config{Brokers: br.Addrs(), Topics: []string{"scrape"}, GroupID: "scrape", Sarama: sc},
		group.Handler[*group.Message]{Do: func(context.Context, []*group.Message) error { return nil }})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for g.Stats().Partitions != int64(parts) {
		if time.Now().After(deadline) {
			b.Fatalf("%d claims: %d after 2 minutes", parts, g.Stats().Partitions)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // a few commit intervals evaluated

	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector(g))
	b.Run("Stats", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if s := g.Stats(); len(s.PartitionStats) != parts {
				b.Fatalf("partitions: got %d, want %d", len(s.PartitionStats), parts)
			}
		}
	})
	b.Run("Gather", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := reg.Gather(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Scrape", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			fams, err := reg.Gather()
			if err != nil {
				b.Fatal(err)
			}
			enc := expfmt.NewEncoder(io.Discard, expfmt.NewFormat(expfmt.TypeTextPlain))
			for _, f := range fams {
				if err := enc.Encode(f); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("HTTP", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		sctx, stop := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- ServeListener(sctx, ln, g, Options{}) }()
		defer func() {
			stop()
			if err := <-served; err != nil {
				b.Error(err)
			}
		}()
		url := "http://" + ln.Addr().String() + "/metrics"
		client := &http.Client{}
		defer client.CloseIdleConnections()
		var bytes int64
		b.ReportAllocs()
		for b.Loop() {
			resp, err := client.Get(url)
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Fatalf("GET /metrics: %d, %v", resp.StatusCode, err)
			}
			bytes = n
		}
		b.ReportMetric(float64(bytes), "body-bytes")
	})
}
