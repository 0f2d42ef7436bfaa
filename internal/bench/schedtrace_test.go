package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	rtrace "runtime/trace"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/exp/trace"
)

// workerSched is what the Go execution tracer saw of a run's worker
// goroutines (those that sleep in Work.Do): how long a wake-up waited to
// run, how long the sleep took, and what the processors did meanwhile.
type workerSched struct {
	wakes       int     // worker transitions from runnable to running
	runnableUs  float64 // mean time a worker waited runnable, µs
	idlePShare  float64 // share of that wait during which a P ran nothing
	samePShare  float64 // share of wakes that ran on the P that readied them
	sleepUs     float64 // mean time blocked in the sleep, µs
	sliceUs     float64 // mean run slice of a worker, µs
	blameOthers float64 // share of the same-P wait spent running other goroutines (not workers) on that P
}

// schedOf reads a runtime/trace of a run and measures its workers.
func schedOf(data []byte, procs int) (workerSched, error) {
	r, err := trace.NewReader(bytes.NewReader(data))
	if err != nil {
		return workerSched{}, err
	}
	type gstate struct {
		worker        bool
		runnableAt    trace.Time
		readyP        trace.ProcID
		lowAt         trace.Time // lowInt when it became runnable
		blameAt       trace.Time // pOther[readyP] when it became runnable
		sleepAt       trace.Time
		runAt         trace.Time
		runnable, run bool
	}
	gs := map[trace.GoID]*gstate{}
	get := func(id trace.GoID) *gstate {
		g := gs[id]
		if g == nil {
			g = &gstate{}
			gs[id] = g
		}
		return g
	}
	var (
		busy         int        // goroutines running or in a syscall
		last, lowInt trace.Time // lowInt: time with fewer than procs busy
		pOther       = map[trace.ProcID]trace.Time{}
		pStart       = map[trace.ProcID]trace.Time{}
		pWorker      = map[trace.ProcID]bool{}
		s            workerSched
		wait, idle   trace.Time
		same         int
		sameWait     trace.Time
		blame        trace.Time
		sleep, slice trace.Time
		sleeps       int
		slicesN      int
	)
	for {
		ev, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return s, err
		}
		now := ev.Time()
		if last != 0 && busy < procs {
			lowInt += now - last
		}
		last = now
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		id := st.Resource.Goroutine()
		g := get(id)
		from, to := st.Goroutine()
		for f := range st.Stack.Frames() {
			if strings.HasSuffix(f.Func, "bench.Work.Do") {
				g.worker = true
			}
		}
		p := ev.Proc()
		wasBusy, isBusy := from == trace.GoRunning || from == trace.GoSyscall, to == trace.GoRunning || to == trace.GoSyscall
		if wasBusy && p != trace.NoProc {
			if !pWorker[p] {
				pOther[p] += now - pStart[p]
			}
			if g.worker && from == trace.GoRunning {
				slice += now - g.runAt
				slicesN++
			}
		}
		if isBusy && p != trace.NoProc {
			pStart[p], pWorker[p] = now, g.worker
		}
		switch {
		case wasBusy && !isBusy:
			busy--
		case !wasBusy && isBusy:
			busy++
		}
		if to == trace.GoWaiting && g.worker && st.Reason == "sleep" {
			g.sleepAt = now
		}
		if from == trace.GoWaiting && g.sleepAt != 0 {
			sleep += now - g.sleepAt
			sleeps++
			g.sleepAt = 0
		}
		if to == trace.GoRunnable && g.worker {
			g.runnable, g.runnableAt, g.readyP, g.lowAt, g.blameAt = true, now, p, lowInt, pOther[p]
		}
		if to == trace.GoRunning {
			g.runAt = now
			if g.worker && g.runnable {
				g.runnable = false
				d := now - g.runnableAt
				s.wakes++
				wait += d
				idle += lowInt - g.lowAt
				if p == g.readyP {
					same++
					sameWait += d
					blame += pOther[p] - g.blameAt
				}
			}
		}
	}
	if s.wakes == 0 || sleeps == 0 || slicesN == 0 || sameWait == 0 {
		return s, fmt.Errorf("the trace shows no worker goroutine sleeping in Work.Do")
	}
	s.runnableUs = float64(wait) / float64(s.wakes) / 1e3
	s.idlePShare = float64(idle) / float64(wait)
	s.samePShare = float64(same) / float64(s.wakes)
	s.sleepUs = float64(sleep) / float64(sleeps) / 1e3
	s.sliceUs = float64(slice) / float64(slicesN) / 1e3
	s.blameOthers = min(float64(blame)/float64(sameWait), 1)
	return s, nil
}

// TestWorkerSchedulingDelay runs the io scenario (Num 64, 1 ms per
// message) for the limit and for orderly under the Go execution tracer and
// reports, for the goroutines that sleep in Work.Do, how long a wake-up
// waited to run, how much of that wait a processor stood idle, how long
// the sleep itself took and how long a worker ran between sleeps: where
// orderly's io gap to the limit goes (docs/SCALING.md, "The sleep,
// timed"). Contenders alternate over rounds; medians. It asserts nothing
// about speed, only that the trace shows the workers.
//
//	ORDERLY_BENCH=1 go test ./internal/bench -run TestWorkerSchedulingDelay -v
func TestWorkerSchedulingDelay(t *testing.T) {
	fleetGate(t)
	const rounds = 3
	names := []string{"limit", "orderly"}
	got := map[string][]workerSched{}
	for round := range rounds {
		for _, name := range roundOrder(names, round+1) {
			var buf bytes.Buffer
			if err := rtrace.Start(&buf); err != nil {
				t.Fatalf("trace: %v", err)
			}
			rep, err := Run(context.Background(), Options{Scenarios: []string{"io"}, Nums: []int{64}, Rounds: 1, Contenders: []string{name}})
			rtrace.Stop()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			s, err := schedOf(buf.Bytes(), runtime.GOMAXPROCS(0))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			got[name] = append(got[name], s)
			var rate float64
			for _, row := range rep.Rows {
				if row.Contender == name && row.Case == "Num=64" {
					rate = row.Median
				}
			}
			t.Logf("round %d %-7s %6.0f msg/s (traced): %d wakes, runnable %5.1f µs (%2.0f%% of it with an idle P; %2.0f%% on the readying P, %2.0f%% of that wait running non-workers), sleep %6.1f µs, run slice %.2f µs",
				round, name, rate, s.wakes, s.runnableUs, 100*s.idlePShare, 100*s.samePShare, 100*s.blameOthers, s.sleepUs, s.sliceUs)
		}
	}
	for _, name := range names {
		med := func(f func(workerSched) float64) float64 {
			xs := make([]float64, 0, rounds)
			for _, s := range got[name] {
				xs = append(xs, f(s))
			}
			slices.Sort(xs)
			return xs[len(xs)/2]
		}
		t.Logf("%-7s medians: runnable %5.1f µs (%2.0f%% with an idle P), sleep %6.1f µs, run slice %.2f µs",
			name, med(func(s workerSched) float64 { return s.runnableUs }), 100*med(func(s workerSched) float64 { return s.idlePShare }),
			med(func(s workerSched) float64 { return s.sleepUs }), med(func(s workerSched) float64 { return s.sliceUs }))
	}
}

// TestSchedOfCountsWorkerWakes traces the limit contender on a known load
// (4 goroutines, 25 calls each of a 1 ms sleep, no Kafka) and checks that
// schedOf finds every sleep and every wake after it, a sleep of at least
// the 1 ms asked for, and shares that are fractions.
func TestSchedOfCountsWorkerWakes(t *testing.T) {
	const num, calls = 4, 25
	var buf bytes.Buffer
	if err := rtrace.Start(&buf); err != nil {
		t.Fatalf("trace: %v", err)
	}
	_, err := Limit{}.Run(context.Background(), RunSpec{Expected: num * calls, Num: num, Size: 1, Work: Work{PerCall: time.Millisecond}})
	rtrace.Stop()
	if err != nil {
		t.Fatalf("limit: %v", err)
	}
	s, err := schedOf(buf.Bytes(), runtime.GOMAXPROCS(0))
	if err != nil {
		t.Fatalf("schedOf: %v", err)
	}
	if s.wakes != num*calls {
		t.Errorf("wakes: got %d, want %d (one per sleep)", s.wakes, num*calls)
	}
	if s.sleepUs < 1000 {
		t.Errorf("mean sleep: got %.1f µs, want at least the 1000 µs asked for", s.sleepUs)
	}
	if s.runnableUs < 0 || s.sliceUs <= 0 {
		t.Errorf("runnable wait %.1f µs, run slice %.2f µs: want a wait of 0 or more and a positive slice", s.runnableUs, s.sliceUs)
	}
	for name, f := range map[string]float64{"idle P": s.idlePShare, "same P": s.samePShare, "others on P": s.blameOthers} {
		if f < 0 || f > 1 {
			t.Errorf("%s share: got %v, want a fraction", name, f)
		}
	}
}

// TestSchedOfRejectsNoWorkers: a trace without goroutines sleeping in
// Work.Do is an error, not a row of zeros.
func TestSchedOfRejectsNoWorkers(t *testing.T) {
	var buf bytes.Buffer
	if err := rtrace.Start(&buf); err != nil {
		t.Fatalf("trace: %v", err)
	}
	time.Sleep(time.Millisecond)
	rtrace.Stop()
	if _, err := schedOf(buf.Bytes(), runtime.GOMAXPROCS(0)); err == nil {
		t.Fatal("schedOf of a trace with no workers: got no error, want one")
	}
	if _, err := schedOf([]byte("not a trace"), 2); err == nil {
		t.Fatal("schedOf of garbage: got no error, want one")
	}
}
