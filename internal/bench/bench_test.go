package bench

import (
	"context"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/orderly-go/orderly/internal/broker"
)

var (
	benchMessages = flag.Int("bench.messages", 0, "BenchmarkScenarios: messages per data set (default 200k for noop, 5k otherwise)")
	benchNums     = []int{8, 64, 256}
)

// BenchmarkScenarios runs the scenarios of `orderly bench` (all but stall)
// as sub-benchmarks, scenario/case/contender, each iteration one full run
// with a fresh consumer group; it reports msg/s from the first handled
// message to the last and the ratio of the total that includes the join.
//
//	go test ./internal/bench -run '^$' -bench Scenarios/io
func BenchmarkScenarios(b *testing.B) {
	br, err := broker.Start(broker.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	opts := Options{Messages: *benchMessages, Nums: benchNums, Progress: io.Discard}
	if err := opts.setDefaults(); err != nil {
		b.Fatal(err)
	}
	h := &harness{opts: opts, b: br, data: map[dataSpec]*dataset{}, rep: newReport(opts)}
	for _, name := range []string{"noop", "io", "batch", "skew", "fail"} {
		s, err := opts.scenario(name)
		if err != nil {
			b.Fatal(err)
		}
		if opts.Messages == 0 {
			s.Data.Messages = 5000
			if name == "noop" {
				s.Data.Messages = 200_000
			}
		}
		for _, c := range s.Cases {
			for _, cn := range s.Contenders {
				b.Run(name+"/"+strings.ReplaceAll(c.Label, " ", "_")+"/"+cn, func(b *testing.B) {
					ds, err := h.dataset(context.Background(), s.Data)
					if err != nil {
						b.Fatal(err)
					}
					con, _ := newContender(cn)
					var handled int64
					var elapsed, total time.Duration
					for b.Loop() {
						r, err := h.runOne(context.Background(), con, h.spec(s, c, ds))
						if err != nil {
							b.Fatal(err)
						}
						handled += r.Handled
						elapsed += r.Elapsed
						total += r.Total
					}
					b.ReportMetric(float64(handled)/elapsed.Seconds(), "msg/s")
					b.ReportMetric(float64(handled)/total.Seconds(), "msg/s-incl-join")
				})
			}
		}
	}
}
