// Package lograte holds back repeated log lines: a poison message retried
// for hours, a dependency down for every lane or a disk that stays full
// must not flood the log with one line per message.
package lograte

import (
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Interval is how often a Limit lets a line through unless its Every
// says otherwise.
const Interval = time.Second

// Limit lets one log line through per Every and counts the ones it held
// back, reported as "suppressed" with the next line that goes through.
// The zero Limit is ready to use (one line per Interval); it is safe for
// concurrent use.
type Limit struct {
	// Every is how often a line goes through; 0: Interval. Set it before
	// the first line.
	Every      time.Duration
	next       atomic.Int64 // unix nanos before which lines are held back
	suppressed atomic.Int64
}

// Info logs msg at info level unless a line went through less than
// Every ago.
func (r *Limit) Info(log *zap.Logger, msg string, fields ...zap.Field) {
	r.Log(log, zapcore.InfoLevel, msg, fields...)
}

// Warn logs msg at warn level unless a line went through less than
// Every ago.
func (r *Limit) Warn(log *zap.Logger, msg string, fields ...zap.Field) {
	r.Log(log, zapcore.WarnLevel, msg, fields...)
}

// Error logs msg at error level unless a line went through less than
// Every ago.
func (r *Limit) Error(log *zap.Logger, msg string, fields ...zap.Field) {
	r.Log(log, zapcore.ErrorLevel, msg, fields...)
}

// Log logs msg at lvl unless a line went through less than Every ago.
func (r *Limit) Log(log *zap.Logger, lvl zapcore.Level, msg string, fields ...zap.Field) {
	if !log.Core().Enabled(lvl) {
		return // a line the logger drops neither takes the turn nor counts
	}
	every := r.Every
	if every <= 0 {
		every = Interval
	}
	now := time.Now().UnixNano()
	next := r.next.Load()
	if now < next || !r.next.CompareAndSwap(next, now+int64(every)) {
		r.suppressed.Add(1)
		return
	}
	if n := r.suppressed.Swap(0); n > 0 {
		fields = append(fields, zap.Int64("suppressed", n))
	}
	log.Log(lvl, msg, fields...)
}
