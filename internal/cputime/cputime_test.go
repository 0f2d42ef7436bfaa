package cputime

import (
	"testing"
	"time"
)

// TestProcessAdvances: busy work shows up as CPU time, and the figure
// never goes backwards.
func TestProcessAdvances(t *testing.T) {
	before, ok := Process()
	if !ok {
		t.Skip("this platform does not report process CPU time")
	}
	sink := 0
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
		for i := range 1000 {
			sink += i
		}
	}
	after, _ := Process()
	if after <= before {
		t.Fatalf("CPU time after 50ms of busy work: got %v, want more than %v (sink %d)", after, before, sink)
	}
}
