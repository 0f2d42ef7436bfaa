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

// Interval is how often a Limit lets a line through.
const Interval = time.Second

// Limit lets one log line through per Interval and counts the ones it
// held back, reported as "suppressed" with the next line that goes
// through. The zero Limit is ready to use; it is safe for concurrent use.
type Limit struct {
	next       atomic.Int64 // unix nanos before which lines are held back
	suppressed atomic.Int64
}

// Warn logs msg at warn level unless a line went through less than
// Interval ago.
func (r *Limit) Warn(log *zap.Logger, msg string, fields ...zap.Field) {
	r.Log(log, zapcore.WarnLevel, msg, fields...)
}

// Error logs msg at error level unless a line went through less than
// Interval ago.
func (r *Limit) Error(log *zap.Logger, msg string, fields ...zap.Field) {
	r.Log(log, zapcore.ErrorLevel, msg, fields...)
}

// Log logs msg at lvl unless a line went through less than Interval ago.
func (r *Limit) Log(log *zap.Logger, lvl zapcore.Level, msg string, fields ...zap.Field) {
	now := time.Now().UnixNano()
	next := r.next.Load()
	if now < next || !r.next.CompareAndSwap(next, now+int64(Interval)) {
		r.suppressed.Add(1)
		return
	}
	if n := r.suppressed.Swap(0); n > 0 {
		fields = append(fields, zap.Int64("suppressed", n))
	}
	log.Log(lvl, msg, fields...)
}
