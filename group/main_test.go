package group

import (
	"testing"

	"go.uber.org/goleak"
)

// go-metrics (used by sarama) starts one process-wide meter goroutine the
// first time a meter is created and never stops it; it is not per Group.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"))
}
