package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	rtrace "runtime/trace"
	"strings"
	"testing"
	"time"

	"golang.org/x/exp/trace"
)

// workerSched is what the Go execution tracer saw of a run's worker
// goroutines (those that sleep in Work.Do) from each sleep to their first
// run after it: how long the sleep took until the worker was readied, how
// long it then waited to run, and what the processors did meanwhile.
type workerSched struct {
	sleeps      int     // sleeps in Work.Do that ended
	wakes       int     // of those, the ones followed by a run (one per sleep, but for the last ones in flight when tracing stopped)
	sleepUs     float64 // mean time from a sleep's start to the worker being readied, µs
	runnableUs  float64 // mean time a readied worker then waited to run, µs
	idleShare   float64 // share of that wait during which fewer goroutines ran (or were in system calls) than there are Ps
	samePShare  float64 // share of wakes that ran on the P that readied them
	othersShare float64 // share of those same-P waits in which that P ran goroutines other than workers
	sliceUs     float64 // mean length of the worker's first run after a wake, µs
}

// isBusy reports whether a goroutine in state x holds a processor.
func isBusy(x trace.GoState) bool { return x == trace.GoRunning || x == trace.GoSyscall }

// schedOf reads a runtime/trace of a run and measures its workers; procs
// is the run's GOMAXPROCS.
func schedOf(data []byte, procs int) (workerSched, error) {
	r, err := trace.NewReader(bytes.NewReader(data))
	if err != nil {
		return workerSched{}, err
	}
	type gstate struct {
		worker    bool       // has had Work.Do on its stack (its earlier transitions count as another goroutine's)
		sleepAt   trace.Time // in a Work.Do sleep since; 0: not
		readyAt   trace.Time // readied after a sleep at; 0: not waiting to run
		readyP    trace.ProcID
		idleAt    trace.Time // idle when readied
		othersAt  trace.Time // others[readyP] when readied
		firstRun  bool       // running its first run after a wake
		runningAt trace.Time
	}
	gs := map[trace.GoID]*gstate{}
	// onP is who runs on a P and since when; others sums each P's time
	// running non-workers up to the start of the current holder's run.
	type holder struct {
		g      trace.GoID
		worker bool
		since  trace.Time
	}
	onP := map[trace.ProcID]holder{}
	others := map[trace.ProcID]trace.Time{}
	othersNow := func(p trace.ProcID, now trace.Time) trace.Time {
		t := others[p]
		if h, ok := onP[p]; ok && !h.worker {
			t += now - h.since
		}
		return t
	}
	var (
		s                     workerSched
		busy                  int        // goroutines running or in a system call
		last, idle            trace.Time // idle: time with busy below procs
		sleep, wait, idleWait trace.Time
		sameWait, othersWait  trace.Time
		slice                 trace.Time
		same, slices          int
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
			idle += now - last
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
		g := gs[id]
		if g == nil {
			g = &gstate{}
			gs[id] = g
		}
		for f := range st.Stack.Frames() {
			if strings.HasSuffix(f.Func, "bench.Work.Do") {
				g.worker = true
			}
		}
		from, to := st.Goroutine()
		if from == to {
			continue // a new trace generation restating the state: nothing happened
		}
		switch {
		case isBusy(from) && !isBusy(to):
			busy--
		case !isBusy(from) && isBusy(to):
			busy++
		}
		p := ev.Proc()
		if from == trace.GoRunning {
			if h, ok := onP[p]; ok && h.g == id {
				if !h.worker {
					others[p] += now - h.since
				}
				delete(onP, p)
			}
			if g.firstRun {
				g.firstRun = false
				slice += now - g.runningAt
				slices++
			}
		}
		switch {
		case to == trace.GoWaiting && g.worker && st.Reason == "sleep":
			g.sleepAt = now
		case from == trace.GoWaiting && g.sleepAt != 0:
			s.sleeps++
			sleep += now - g.sleepAt
			g.sleepAt = 0
			if to == trace.GoRunnable {
				g.readyAt, g.readyP, g.idleAt, g.othersAt = now, p, idle, othersNow(p, now)
			}
		}
		if to == trace.GoRunning && p != trace.NoProc {
			if h, ok := onP[p]; ok && !h.worker { // its end was not seen: close it here
				others[p] += now - h.since
			}
			onP[p] = holder{id, g.worker, now}
			if g.readyAt != 0 {
				d := now - g.readyAt
				s.wakes++
				wait += d
				idleWait += idle - g.idleAt
				if p == g.readyP {
					same++
					sameWait += d
					othersWait += others[p] - g.othersAt
				}
				g.readyAt, g.firstRun, g.runningAt = 0, true, now
			}
		}
	}
	switch {
	case s.sleeps == 0:
		return s, fmt.Errorf("the trace shows no goroutine sleeping in Work.Do")
	case s.wakes == 0 || slices == 0 || wait == 0 || same == 0 || sameWait == 0:
		return s, fmt.Errorf("the trace shows %d sleeps in Work.Do but %d wakes after them (%d on the readying P) and %d runs: too few to measure", s.sleeps, s.wakes, same, slices)
	}
	s.sleepUs = float64(sleep) / float64(s.sleeps) / 1e3
	s.runnableUs = float64(wait) / float64(s.wakes) / 1e3
	s.idleShare = float64(idleWait) / float64(wait)
	s.samePShare = float64(same) / float64(s.wakes)
	s.othersShare = float64(othersWait) / float64(sameWait)
	s.sliceUs = float64(slice) / float64(slices) / 1e3
	return s, nil
}

// TestWorkerSchedulingDelay runs the io scenario (Num 64, 1 ms per
// message) for the limit and for orderly under the Go execution tracer and
// reports, for the goroutines that sleep in Work.Do (see workerSched), how
// long the sleep took until the worker was readied, how long it then
// waited to run and what the processors did meanwhile, and how long its
// run after the wake was: where orderly's io gap to the limit goes
// (docs/SCALING.md, "The wait, traced"). Contenders alternate over
// rounds; medians. It asserts nothing about speed, only that the trace
// shows the workers.
//
//	ORDERLY_BENCH=1 go test ./internal/bench -run TestWorkerSchedulingDelay -v
func TestWorkerSchedulingDelay(t *testing.T) {
	fleetGate(t)
	const rounds = 3
	names := []string{"limit", "orderly"}
	got := map[string][]workerSched{}
	rates := map[string][]float64{}
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
			var rate float64
			for _, row := range rep.Rows {
				if row.Contender == name && row.Case == "Num=64" {
					rate = row.Median
				}
			}
			got[name], rates[name] = append(got[name], s), append(rates[name], rate)
			t.Logf("round %d %s", round, schedLine(name, rate, s))
		}
	}
	for _, name := range names {
		med := func(f func(workerSched) float64) float64 {
			xs := make([]float64, 0, rounds)
			for _, s := range got[name] {
				xs = append(xs, f(s))
			}
			return median(xs)
		}
		m := workerSched{
			sleeps:      int(med(func(s workerSched) float64 { return float64(s.sleeps) })),
			wakes:       int(med(func(s workerSched) float64 { return float64(s.wakes) })),
			sleepUs:     med(func(s workerSched) float64 { return s.sleepUs }),
			runnableUs:  med(func(s workerSched) float64 { return s.runnableUs }),
			idleShare:   med(func(s workerSched) float64 { return s.idleShare }),
			samePShare:  med(func(s workerSched) float64 { return s.samePShare }),
			othersShare: med(func(s workerSched) float64 { return s.othersShare }),
			sliceUs:     med(func(s workerSched) float64 { return s.sliceUs }),
		}
		t.Logf("medians %s", schedLine(name, median(rates[name]), m))
	}
}

// schedLine is one contender's figures as TestWorkerSchedulingDelay logs
// them.
func schedLine(name string, rate float64, s workerSched) string {
	return fmt.Sprintf("%-7s %6.0f msg/s (traced): %d sleeps, %d wakes; sleep %6.1f µs, then runnable %5.1f µs (%3.0f%% of it with a P idle; %3.0f%% of wakes on the readying P, %3.0f%% of their wait running non-workers there), first run %.2f µs",
		name, rate, s.sleeps, s.wakes, s.sleepUs, s.runnableUs, 100*s.idleShare, 100*s.samePShare, 100*s.othersShare, s.sliceUs)
}

// TestSchedOfCountsWorkerWakes traces the limit contender on a known load
// (4 goroutines, 25 calls each of a 1 ms sleep, no Kafka) and checks that
// schedOf finds every sleep and the one wake after each, a sleep of at
// least the 1 ms asked for, and shares that are fractions.
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
	if s.sleeps != num*calls || s.wakes != num*calls {
		t.Errorf("sleeps %d, wakes %d: want %d of each (one per call)", s.sleeps, s.wakes, num*calls)
	}
	if s.sleepUs < 1000 {
		t.Errorf("mean sleep: got %.1f µs, want at least the 1000 µs asked for", s.sleepUs)
	}
	if s.runnableUs < 0 || s.sliceUs <= 0 {
		t.Errorf("runnable wait %.1f µs, first run %.2f µs: want a wait of 0 or more and a positive run", s.runnableUs, s.sliceUs)
	}
	for name, f := range map[string]float64{"idle": s.idleShare, "same P": s.samePShare, "others on P": s.othersShare} {
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
