package group

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestDerivedDefaults: DrainTimeout defaults to the longer of 30s and
// MsgTimeout plus a second, at most half of sarama's Rebalance.Timeout, and
// a stuck worker's grace past MsgTimeout is a tenth of it, at least 1s and
// at most 30s, as Config documents.
func TestDerivedDefaults(t *testing.T) {
	for _, tt := range []struct {
		rebalance, msgTimeout, wantDrain time.Duration // msgTimeout as in Config: 0 the default, -1 none
	}{
		{10 * time.Second, 0, 5 * time.Second},                 // half the rebalance timeout
		{60 * time.Second, 0, 30 * time.Second},                // sarama's default
		{60 * time.Second, 29 * time.Second, 30 * time.Second}, // the longest MsgTimeout it covers
		{5 * time.Minute, 10 * time.Second, 30 * time.Second},  // 30s, MsgTimeout short
		{5 * time.Minute, -1, 30 * time.Second},                // 30s, no MsgTimeout
		{5 * time.Minute, 60 * time.Second, 61 * time.Second},  // MsgTimeout and a second
		{62 * time.Second, 30 * time.Second, 31 * time.Second}, // orderly consume's defaults
		{5 * time.Minute, 0, 150 * time.Second},                // half the rebalance timeout: below MsgTimeout's 5m
		{20 * time.Minute, 0, DefaultMsgTimeout + time.Second}, // the default MsgTimeout and a second
	} {
		g := offlineGroup(t, func(c *Config) {
			c.Sarama = DefaultSarama()
			c.Sarama.Consumer.Group.Rebalance.Timeout = tt.rebalance
			c.MsgTimeout = tt.msgTimeout
		})
		if got := g.cfg.DrainTimeout; got != tt.wantDrain {
			t.Errorf("DrainTimeout with Rebalance.Timeout %v, MsgTimeout %v: got %v, want %v", tt.rebalance, tt.msgTimeout, got, tt.wantDrain)
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

// TestShortDrainWarned: New warns, once, naming the three settings, when
// the DrainTimeout it derives is capped (half of Rebalance.Timeout) below
// a MsgTimeout the user set plus a second; not when the drain covers it,
// when MsgTimeout is the default or none, or when DrainTimeout is set.
func TestShortDrainWarned(t *testing.T) {
	const msg = "DrainTimeout is capped at half of Sarama.Consumer.Group.Rebalance.Timeout, below MsgTimeout: a call in flight at a revoke is cancelled before its deadline; set Rebalance.Timeout to at least twice MsgTimeout plus 2s, or set DrainTimeout"
	for _, tt := range []struct {
		name                       string
		rebalance, msgTimeout, set time.Duration // set: DrainTimeout as given
		wantDrain                  time.Duration // 0: no warning
	}{
		{"MsgTimeout past half of sarama's rebalance timeout", 60 * time.Second, 60 * time.Second, 0, 30 * time.Second},
		{"MsgTimeout just past it", 10 * time.Second, 5 * time.Second, 0, 5 * time.Second},
		{"the longest MsgTimeout covered", 60 * time.Second, 29 * time.Second, 0, 0},
		{"a rebalance timeout that covers it", 5 * time.Minute, 60 * time.Second, 0, 0},
		{"the default MsgTimeout", 60 * time.Second, 0, 0, 0},
		{"no MsgTimeout", 60 * time.Second, -1, 0, 0},
		{"DrainTimeout set", 60 * time.Second, 60 * time.Second, 45 * time.Second, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.WarnLevel)
			offlineGroup(t, func(c *Config) {
				c.Sarama = DefaultSarama()
				c.Sarama.Consumer.Group.Rebalance.Timeout = tt.rebalance
				c.MsgTimeout, c.DrainTimeout, c.Logger = tt.msgTimeout, tt.set, zap.New(core)
			})
			warned := logs.FilterMessage(msg).All()
			if tt.wantDrain == 0 {
				if len(warned) != 0 {
					t.Fatalf("got %d warnings (%v), want none", len(warned), warned[0].ContextMap())
				}
				return
			}
			if len(warned) != 1 {
				t.Fatalf("got %d warnings, want 1", len(warned))
			}
			got := warned[0].ContextMap()
			want := map[string]any{"group": "g", "drain_timeout": tt.wantDrain, "msg_timeout": tt.msgTimeout, "rebalance_timeout": tt.rebalance}
			if len(got) != len(want) {
				t.Fatalf("fields: got %v, want %v", got, want)
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("field %s: got %v, want %v", k, got[k], v)
				}
			}
		})
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

// TestRetryExhausted: an item has used up its attempts when its next
// attempt is past Retry.MaxAttempts, and never with MaxAttempts 0
// (unlimited).
func TestRetryExhausted(t *testing.T) {
	for _, tt := range []struct {
		maxAttempts, attempt int
		want                 bool
	}{
		{0, 1, false},
		{0, 1000, false},
		{3, 1, false},
		{3, 3, false}, // its last allowed attempt is still to run
		{3, 4, true},  // three failed
		{1, 2, true},
	} {
		if got := (Retry{MaxAttempts: tt.maxAttempts}).exhausted(tt.attempt); got != tt.want {
			t.Errorf("MaxAttempts %d, next attempt %d: got exhausted %v, want %v", tt.maxAttempts, tt.attempt, got, tt.want)
		}
	}
}

// TestReadBackTimeWarned: New warns, once, naming the time left and the
// three settings it comes from, when a drain that runs its whole
// DrainTimeout (derived or set) leaves the read-back of the final commit
// less than a second of the release window (seven eighths of the
// rebalance timeout less a heartbeat interval), or less than its quarter
// of the rebalance timeout when that is shorter; not otherwise. The
// default drain, the shorter of half the rebalance timeout and the
// longer of 30s and MsgTimeout plus a second, keeps the quarter up to a
// heartbeat of five eighths of the timeout less that drain: an eighth
// of the timeout when the drain is half of it, more when it is shorter.
func TestReadBackTimeWarned(t *testing.T) {
	const msg = "DrainTimeout leaves too little time to read back a final commit: a partition whose drain runs its whole DrainTimeout is OnLost unless the coordinator answers at once (or always, with no time left); lower DrainTimeout or Sarama.Consumer.Group.Heartbeat.Interval, or raise Sarama.Consumer.Group.Rebalance.Timeout"
	for _, tt := range []struct {
		name                      string
		rebalance, heartbeat, set time.Duration // set: DrainTimeout as given, 0 the default (DefaultDrainTimeout)
		msg                       time.Duration // MsgTimeout; 0: the default (5m: the default drain is half the rebalance timeout)
		wantLeft                  time.Duration
		warned                    bool
	}{
		{"sarama's defaults", 60 * time.Second, 3 * time.Second, 0, 0, 19500 * time.Millisecond, false},
		{"10s with sarama's heartbeat", 10 * time.Second, 3 * time.Second, 0, 0, 750 * time.Millisecond, true},
		{"10s with a 1s heartbeat", 10 * time.Second, time.Second, 0, 0, 2750 * time.Millisecond, false},
		{"a DrainTimeout past the window", 60 * time.Second, 3 * time.Second, 50 * time.Second, 0, -500 * time.Millisecond, true},
		{"a DrainTimeout a second and a half short of it", 60 * time.Second, 3 * time.Second, 48 * time.Second, 0, 1500 * time.Millisecond, false},
		{"2s: under its quarter (0.5s)", 2 * time.Second, 300 * time.Millisecond, 0, 0, 450 * time.Millisecond, true},
		{"2s: its quarter left", 2 * time.Second, 200 * time.Millisecond, 0, 0, 550 * time.Millisecond, false},
		// The default drain is 30s, not half of 120s: a 45s heartbeat,
		// three eighths of the timeout, leaves the read-back its quarter.
		{"120s with a 10s MsgTimeout and a 45s heartbeat: its quarter left", 120 * time.Second, 45 * time.Second, 0, 10 * time.Second, 30 * time.Second, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.WarnLevel)
			g := offlineGroup(t, func(c *Config) {
				c.Sarama = DefaultSarama()
				c.Sarama.Consumer.Group.Rebalance.Timeout, c.Sarama.Consumer.Group.Heartbeat.Interval = tt.rebalance, tt.heartbeat
				c.DrainTimeout, c.Logger = tt.set, zap.New(core)
				if tt.msg != 0 {
					c.MsgTimeout = tt.msg
				}
				// sarama wants the heartbeat inside the session.
				c.Sarama.Consumer.Group.Session.Timeout = max(c.Sarama.Consumer.Group.Session.Timeout, 3*tt.heartbeat)
			})
			if got := releaseWindow(g.cfg.Sarama) - g.cfg.DrainTimeout; got != tt.wantLeft {
				t.Errorf("time left for the read-back: got %v, want %v", got, tt.wantLeft)
			}
			warned := logs.FilterMessage(msg).All()
			if !tt.warned {
				if len(warned) != 0 {
					t.Fatalf("got %d warnings (%v), want none", len(warned), warned[0].ContextMap())
				}
				return
			}
			if len(warned) != 1 {
				t.Fatalf("got %d warnings, want 1", len(warned))
			}
			got := warned[0].ContextMap()
			want := map[string]any{"group": "g", "read_back_time": tt.wantLeft, "drain_timeout": g.cfg.DrainTimeout,
				"rebalance_timeout": tt.rebalance, "heartbeat_interval": tt.heartbeat}
			if len(got) != len(want) {
				t.Fatalf("fields: got %v, want %v", got, want)
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("field %s: got %v, want %v", k, got[k], v)
				}
			}
		})
	}
}
