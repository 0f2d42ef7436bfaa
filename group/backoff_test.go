package group

import (
	"testing"
	"time"
)

// TestRetryBackoff (Config.Retry): the wait before an item's attempt is
// Backoff before the first retry (attempt 2), doubled for each one after,
// capped at MaxBackoff; Jitter spreads it by up to that fraction either
// way, and a negative Jitter not at all.
func TestRetryBackoff(t *testing.T) {
	newFailures := func(r Retry) *failures[*Message] {
		return offlineGroup(t, func(c *Config) { c.Retry = r }).fail
	}
	ms := time.Millisecond
	exact := newFailures(Retry{Backoff: 100 * ms, MaxBackoff: time.Second, Jitter: -1})
	for _, tt := range []struct {
		attempt int
		want    time.Duration
	}{
		{2, 100 * ms}, {3, 200 * ms}, {4, 400 * ms}, {5, 800 * ms},
		{6, time.Second}, {7, time.Second}, // capped
		{64, time.Second}, // far past any shift: still the cap
	} {
		if got := exact.backoff(tt.attempt); got != tt.want {
			t.Errorf("backoff before attempt %d: got %v, want %v", tt.attempt, got, tt.want)
		}
	}

	const samples = 2000
	spread := newFailures(Retry{Backoff: 100 * ms, MaxBackoff: time.Second, Jitter: 0.5})
	lo, hi := time.Duration(1<<62), time.Duration(0)
	for range samples {
		d := spread.backoff(3) // 200ms, spread by up to 100ms either way
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo < 100*ms || hi > 300*ms {
		t.Errorf("backoff before attempt 3 with Jitter 0.5: got %v to %v over %d draws, want within 100ms to 300ms", lo, hi, samples)
	}
	if lo > 150*ms || hi < 250*ms {
		t.Errorf("backoff before attempt 3 with Jitter 0.5: got %v to %v over %d draws, want it spread over most of 100ms to 300ms", lo, hi, samples)
	}
	capped := newFailures(Retry{Backoff: 100 * ms, MaxBackoff: 300 * ms, Jitter: 0.5})
	for range samples {
		if d := capped.backoff(10); d < 150*ms || d > 450*ms {
			t.Fatalf("backoff past the cap with Jitter 0.5: got %v, want MaxBackoff 300ms spread by up to half: 150ms to 450ms", d)
		}
	}
	if d := newFailures(Retry{}).g.cfg.Retry; d.Backoff != DefaultRetryBackoff || d.MaxBackoff != DefaultMaxBackoff || d.Jitter != DefaultJitter {
		t.Errorf("Retry defaults: got %+v, want Backoff %v, MaxBackoff %v, Jitter %v", d, DefaultRetryBackoff, DefaultMaxBackoff, DefaultJitter)
	}
	// A Backoff above the default cap, with MaxBackoff unset: the cap
	// rises to it (New failed, blaming a MaxBackoff never set).
	if d := newFailures(Retry{Backoff: 20 * time.Second}).g.cfg.Retry; d.MaxBackoff != 20*time.Second {
		t.Errorf("Retry{Backoff: 20s}: got MaxBackoff %v, want 20s", d.MaxBackoff)
	}
}
