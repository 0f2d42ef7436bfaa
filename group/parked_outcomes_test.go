package group

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestParkedOutcomesCountTheirEnd (Outcomes): with Unordered and a
// DataPath every failure is parked (ParkAfter 0). The first attempt of
// every third offset fails: parked, then handled from the parked queue at
// attempt 2. Partition 0's offset 1 always fails: parked at attempts 2
// and 3, then dead-lettered. Each partition's Outcomes count how the
// redeliveries of its parked messages ended, so that Handled summed over
// the partitions is Stats.Handled and the records Do handled; Parked
// counts each move to the queue, and each failed attempt counts once.
func TestParkedOutcomesCountTheirEnd(t *testing.T) {
	const n, keys, poison = 300, 30, 1 // poison: an offset of partition 0
	r := newRig(t, "parked-outcomes", 2, n, keys)
	w := r.work(0, 0)
	cfg := r.config("parked-outcomes")
	cfg.Size, cfg.Num, cfg.Ordering, cfg.DataPath = 8, 4, Unordered, t.TempDir()
	cfg.Retry = Retry{Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, MaxAttempts: 3}
	g := newGroup(t, cfg, func(ctx context.Context, batch []*Message) error {
		var be BatchError
		ok := make([]*Message, 0, len(batch))
		for i, m := range batch {
			switch {
			case m.Partition == 0 && m.Offset == poison:
				r.markSettled(m.Partition, m.Offset) // parked, then dead-lettered
				be.Fail(i, errors.New("always fails"))
			case m.Offset%3 == 0 && m.Attempt == 1:
				r.markSettled(m.Partition, m.Offset) // parked
				be.Fail(i, errors.New("fails once"))
			default:
				ok = append(ok, m)
			}
		}
		if err := w.Do(ctx, ok); err != nil {
			return err
		}
		return be.Err()
	})
	hw := r.b.HighWatermarks(r.topic)
	if len(hw) != 2 || hw[0] <= poison || hw[1] == 0 {
		t.Fatalf("high watermarks %v: want both partitions with records, partition 0 past offset %d", hw, poison)
	}
	want := map[int32]Outcomes{}
	for p, end := range hw {
		thirds := (end + 2) / 3 // offsets 0, 3, 6... below end
		o := Outcomes{Handled: end, Parked: thirds, FailedAttempts: thirds}
		if p == 0 {
			o.Handled--
			o.Parked += 2
			o.FailedAttempts += 3
			o.DeadLettered = 1
		}
		want[p] = o
	}

	stop := run(t, g)
	waitFor(t, time.Minute, "every record handled or dead-lettered, nothing parked, everything committed", func() bool {
		st := g.Stats()
		return st.Handled == n-1 && st.DeadLettered.MaxAttempts == 1 && st.Parked == 0 && r.b.CaughtUp(cfg.GroupID, r.topic)
	})
	var got map[int32]Outcomes
	var handled, sum int64
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := g.Stats()
		got, handled, sum = map[int32]Outcomes{}, st.Handled, 0
		for _, ps := range st.PartitionStats {
			got[ps.Partition] = ps.Outcomes
			sum += ps.Outcomes.Handled
		}
		if fmt.Sprint(got) == fmt.Sprint(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if sum != handled || handled != n-1 {
		t.Errorf("Outcomes.Handled summed over the partitions: got %d, Stats.Handled %d; want both %d (every record but the dead-lettered one)", sum, handled, n-1)
	}
	for p := range hw {
		if got[p] != want[p] {
			t.Errorf("partition %d outcomes: got %+v, want %+v", p, got[p], want[p])
		}
	}
	r.checkLost(false, false, 1)
}
