// Package leakcheck runs a package's tests under goleak: after the last
// test, no goroutine the package started may be left running.
package leakcheck

import (
	"testing"

	"go.uber.org/goleak"
)

// ignore is the one goroutine allowed to outlive the tests: go-metrics
// (sarama's metrics registry) starts a process-wide meter ticker the first
// time a meter is made and never stops it; it is not per client.
var ignore = goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick")

// Main is a TestMain: func TestMain(m *testing.M) { leakcheck.Main(m) }.
func Main(m *testing.M) { goleak.VerifyTestMain(m, ignore) }

// Find reports goroutines left running, for a TestMain that has cleanup of
// its own to do before checking.
func Find() error { return goleak.Find(ignore) }
