package group

import (
	"testing"
	"time"
)

// TestCommitMetadataOff (Config.CommitMetadata -1): member A finishes
// everything but one lane, held by a failure waiting for its retry, and
// leaves; its commits, read back from the broker, carry no metadata, so
// member B handles again everything from the committed offset up
// (Stats.Resumed 0). With the default, A's metadata lists what it
// finished and B skips it (Stats.Resumed above 0).
func TestCommitMetadataOff(t *testing.T) {
	t.Parallel() // mostly waits on the broker
	const n, keys, target = heldN, heldKeys, heldTarget
	for _, tt := range []struct {
		name string
		meta int
	}{
		{"off", -1},
		{"default", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// The failure waits while A runs; B, told of the wait by A's
			// metadata (the default), keeps to it.
			r, cfg, do, failing := heldLaneRig(t, "meta-"+tt.name, 3*time.Second)
			cfg.CommitMetadata = tt.meta
			c := r.oneLaneHeld(cfg, do)
			if tt.meta < 0 && c.Metadata != "" {
				t.Errorf("A's commit metadata with CommitMetadata -1: got %q, want none", c.Metadata)
			}
			if tt.meta == 0 && c.Metadata == "" {
				t.Error("A's commit metadata with the default: got none, want the finished set")
			}
			failing.Store(false)
			b := newGroup(t, cfg, do)
			r.runToEnd(b, cfg.GroupID)
			st := b.Stats()
			switch {
			case tt.meta < 0 && (st.Resumed != 0 || st.Handled != n-target):
				t.Errorf("B: got Resumed %d, Handled %d; want 0 and %d (everything from the committed offset up, again)", st.Resumed, st.Handled, n-target)
			case tt.meta == 0 && (st.Resumed == 0 || st.Handled >= n/2):
				t.Errorf("B: got Resumed %d, Handled %d; want what A finished skipped and less than %d handled", st.Resumed, st.Handled, n/2)
			}
			t.Logf("B: %d skipped as finished by A (Resumed), %d handled", st.Resumed, st.Handled)
			r.check(true) // A's finished messages repeat under B when nothing records them
		})
	}
}
