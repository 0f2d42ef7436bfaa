// Package bench is the side-by-side benchmark harness behind `orderly bench`
// and the package's go test benchmarks. It starts one in-process kfake
// broker, produces each data set once, and runs contenders on it in
// alternating rounds, the order rotated every round (A B C, B C A, C A B,
// ...), each run after a runtime.GC() and with a fresh consumer group that
// reads the topic from offset 0:
//
//   - raw: a plain sarama ConsumerGroup loop, one goroutine per partition,
//     MarkMessage per message;
//   - franz: a plain franz-go (kgo) consumer-group loop, one goroutine per
//     partition, MarkCommitRecords per record (AutoCommitMarks);
//   - databus: the databus/group design of seed 001 (global commit list,
//     per-message chan send, Size/Ticker batches), ported in databus.go;
//   - limit: the same simulated work done by Num plain goroutines, no Kafka
//     (the physical limit of the simulated I/O on this machine);
//   - orderly: github.com/orderly-go/orderly/group.
//
// Every contender is timed from the start of the first handler call to the
// end of the last one (the group join is not counted); the total including
// the join is reported too. Results are medians over rounds, reported as
// ratios to a baseline measured in the same run.
package bench

import (
	"context"
	"time"
)

// Contender is one consumer implementation under test.
type Contender interface {
	Name() string
	// Run consumes spec.Topic with a fresh consumer group until
	// spec.Expected messages are handled (or, with spec.UntilCancel,
	// until ctx ends) and stops everything it started before returning.
	Run(ctx context.Context, spec RunSpec) (Result, error)
}

// RunSpec is everything a contender needs for one run.
type RunSpec struct {
	Addrs   []string
	Topic   string
	GroupID string
	// Expected is how many messages the topic holds; the run ends when as
	// many have been handled.
	Expected int
	// UntilCancel makes the run last until ctx ends (the stall scenario);
	// ending then is not an error.
	UntilCancel bool

	Num         int           // worker goroutines (raw: one per partition, whatever Num says)
	Size        int           // most messages per handler call
	Chan        int           // sarama ChannelBufferSize; databus's per-worker chan capacity
	Ticker      time.Duration // a partial batch waits at most this long; < 0: never wait
	MaxInFlight int           // orderly only: fetched-and-unfinished bound (stall scenario); 0: the group's default

	Work Work
}

// Result is what one run measured.
type Result struct {
	Handled int64         // messages handled (a retried message counts once)
	Elapsed time.Duration // start of the first handler call to the end of the last
	Total   time.Duration // Run called (before the group join) to the end of the last handler call
	Failed  int64         // handler calls that failed (and were retried)
	// CPU is the process's user+system CPU time over the whole run, join,
	// shutdown and the in-process broker included (set by the harness).
	CPU time.Duration
	// RSSStart and RSSPeak are the process's RSS when the run started and
	// its peak over the run (scale scenario only; 0: not measured).
	RSSStart, RSSPeak uint64
}

// CPUPerMsg is the process CPU time per handled message.
func (r Result) CPUPerMsg() time.Duration {
	if r.Handled <= 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Handled)
}

// Rate is the throughput between the first and the last handled message.
func (r Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Handled) / r.Elapsed.Seconds()
}
