package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestFranz: the franz-go loop handles every message once a failing call
// is repeated, commits every partition to its high watermark on the way
// out, and a run cut short says how far it got.
func TestFranz(t *testing.T) {
	b, ds := testData(t, dataSpec{Messages: 2000, Partitions: 4, Keys: 50})
	spec := testSpec(b, ds, "franz")
	spec.Work = Work{PerItem: 10 * time.Microsecond, FailRate: 0.05}
	r := runContender(t, Franz{}, spec)
	if r.Failed == 0 {
		t.Error("franz: no failed calls at a 5% failure rate")
	}
	checkCommitted(t, b, spec.GroupID, ds.Topic)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	spec.GroupID = "franz-cancelled"
	if _, err := (Franz{}).Run(ctx, spec); err == nil || !strings.Contains(err.Error(), "handled") {
		t.Errorf("cancelled franz run: %v, want an error saying how many were handled", err)
	}
}
