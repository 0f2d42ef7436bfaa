package bench

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// sleepWithCPU runs num goroutines, each sleeping 1 ms per message for
// per messages and then spending cpu on the processor (spinning on the
// clock), and returns the messages per second: the io scenario's limit
// for a consumer that pays cpu per message beside the sleep.
func sleepWithCPU(num, per int, cpu time.Duration) float64 {
	var wg sync.WaitGroup
	start := time.Now()
	for range num {
		wg.Go(func() {
			for range per {
				time.Sleep(time.Millisecond)
				for t := time.Now(); time.Since(t) < cpu; {
				}
			}
		})
	}
	wg.Wait()
	return float64(num*per) / time.Since(start).Seconds()
}

// TestSleepLimitUnderCPU reports what the io scenario's limit (Num
// goroutines sleeping 1 ms per message) reaches when each message also
// costs 0-3 µs of CPU, as a ratio to the plain limit of the same round:
// on a machine with few cores the sleepers wake in bursts, and each
// one's CPU delays the rest of its burst, so a consumer's ratio at Num
// 256 follows the CPU it spends per message (see docs/SCALING.md, "The
// sleep, timed"). Runs alternate within each round; medians over rounds.
// It asserts nothing: the figures depend on the machine.
//
//	ORDERLY_BENCH=1 go test ./internal/bench -run TestSleepLimitUnderCPU -v
func TestSleepLimitUnderCPU(t *testing.T) {
	fleetGate(t)
	const rounds, per = 3, 2000
	cpus := []time.Duration{0, time.Microsecond, 2 * time.Microsecond, 3 * time.Microsecond}
	for _, num := range []int{64, 256} {
		ratios := make([][]float64, len(cpus))
		plain := make([]float64, 0, rounds)
		for round := range rounds {
			rates := make([]float64, len(cpus))
			for j := range cpus {
				i := j
				if round%2 == 1 {
					i = len(cpus) - 1 - j // odd rounds run in reverse
				}
				rates[i] = sleepWithCPU(num, per, cpus[i])
			}
			plain = append(plain, rates[0])
			for i := range cpus {
				ratios[i] = append(ratios[i], rates[i]/rates[0])
			}
		}
		var b strings.Builder
		for i, cpu := range cpus[1:] {
			fmt.Fprintf(&b, "; %v CPU/msg: %.2fx", cpu, median(ratios[i+1]))
		}
		t.Logf("Num %d: plain limit %s msg/s (nominal %s)%s", num, FormatCount(median(plain)), FormatCount(float64(num)*1000), b.String())
	}
}
