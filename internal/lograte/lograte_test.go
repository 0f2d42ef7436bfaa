package lograte

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestLimit: of 100 lines in a burst one goes through; the first after
// Interval goes through too, saying how many were held back.
func TestLimit(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(core)
	var l Limit
	for i := range 100 {
		l.Warn(log, "burst", zap.Int("i", i))
	}
	time.Sleep(Interval + 50*time.Millisecond)
	l.Error(log, "after")
	got := logs.All()
	if len(got) != 2 {
		t.Fatalf("lines: got %d, want 2 (the burst's first, then the one after Interval)", len(got))
	}
	if got[0].Message != "burst" || got[0].ContextMap()["i"] != int64(0) || got[0].Level != zapcore.WarnLevel {
		t.Errorf("first line: got %q %v at %v, want the burst's first at warn", got[0].Message, got[0].ContextMap(), got[0].Level)
	}
	if got[1].Message != "after" || got[1].ContextMap()["suppressed"] != int64(99) || got[1].Level != zapcore.ErrorLevel {
		t.Errorf("second line: got %q %v at %v, want \"after\" with suppressed 99 at error", got[1].Message, got[1].ContextMap(), got[1].Level)
	}
}

// TestLimitEvery: a Limit with Every holds lines back for that long, not
// Interval, and the next line through says how many it held back.
func TestLimitEvery(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(core)
	l := Limit{Every: 3 * Interval}
	l.Info(log, "first")
	time.Sleep(Interval + 50*time.Millisecond)
	for range 5 {
		l.Info(log, "held") // past Interval, within Every
	}
	if got := len(logs.All()); got != 1 {
		t.Fatalf("lines within Every: got %d, want 1", got)
	}
	time.Sleep(2*Interval + 50*time.Millisecond)
	l.Warn(log, "after")
	got := logs.All()
	if len(got) != 2 || got[1].Message != "after" || got[1].ContextMap()["suppressed"] != int64(5) || got[0].Level != zapcore.InfoLevel {
		t.Fatalf("lines: got %d (%v), want \"first\" at info, then \"after\" with suppressed 5", len(got), got)
	}
}

// TestLimitLevelOff: lines below the logger's level, which it drops
// anyway, neither take the Limit's turn nor count as suppressed: an
// error after them goes through at once, without a count.
func TestLimitLevelOff(t *testing.T) {
	core, logs := observer.New(zapcore.ErrorLevel)
	log := zap.New(core)
	var l Limit
	for range 5 {
		l.Warn(log, "dropped")
	}
	l.Error(log, "error")
	got := logs.All()
	if len(got) != 1 || got[0].Message != "error" || got[0].ContextMap()["suppressed"] != nil {
		t.Fatalf("lines: got %d (%v), want the error alone, without a suppressed count", len(got), got)
	}
}
