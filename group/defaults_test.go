package group

import (
	"testing"
	"time"
)

// TestDerivedDefaults: DrainTimeout defaults to half of sarama's
// Rebalance.Timeout, at most 30s, and a stuck worker's grace past
// MsgTimeout is a tenth of it, at least 1s and at most 30s, as Config
// documents.
func TestDerivedDefaults(t *testing.T) {
	for _, tt := range []struct {
		rebalance, wantDrain time.Duration
	}{
		{10 * time.Second, 5 * time.Second},
		{60 * time.Second, 30 * time.Second}, // sarama's default
		{5 * time.Minute, 30 * time.Second},  // capped
	} {
		g := offlineGroup(t, func(c *Config) {
			c.Sarama = DefaultSarama()
			c.Sarama.Consumer.Group.Rebalance.Timeout = tt.rebalance
		})
		if got := g.cfg.DrainTimeout; got != tt.wantDrain {
			t.Errorf("DrainTimeout with Rebalance.Timeout %v: got %v, want %v", tt.rebalance, got, tt.wantDrain)
		}
	}
	for _, tt := range []struct {
		timeout, want time.Duration
	}{
		{200 * time.Millisecond, time.Second}, // at least 1s
		{20 * time.Second, 2 * time.Second},   // a tenth
		{DefaultMsgTimeout, 30 * time.Second}, // at most 30s
	} {
		if got := stuckGrace(tt.timeout); got != tt.want {
			t.Errorf("stuck grace past MsgTimeout %v: got %v, want %v", tt.timeout, got, tt.want)
		}
	}
}

// TestChanDefault: Chan defaults to Size, and to DefaultChanSize1 when
// Size is 1, as Config documents; an explicit Chan stays. sarama's
// ChannelBufferSize is set from it.
func TestChanDefault(t *testing.T) {
	for _, tt := range []struct{ size, chanSet, want int }{
		{1, 0, DefaultChanSize1},
		{8, 0, 8},
		{1024, 0, 1024},
		{0, 0, DefaultSize},
		{1, 1, 1},
		{1, 4096, 4096},
	} {
		g := offlineGroup(t, func(c *Config) { c.Size, c.Chan = tt.size, tt.chanSet })
		if got, buf := g.cfg.Chan, g.cfg.Sarama.ChannelBufferSize; got != tt.want || buf != tt.want {
			t.Errorf("Size %d, Chan %d: got Chan %d, ChannelBufferSize %d; want %d", tt.size, tt.chanSet, got, buf, tt.want)
		}
	}
}
