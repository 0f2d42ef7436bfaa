package group

import (
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// rateLimit lets one log line through per interval and counts the ones it
// held back, reported with the next line that goes through: a poison
// message retried for hours, or a dependency down for all lanes, must not
// flood the log.
type rateLimit struct {
	next       atomic.Int64 // unix nanos before which lines are held back
	suppressed atomic.Int64
}

const logInterval = time.Second

func (r *rateLimit) warn(log *zap.Logger, msg string, fields ...zap.Field) {
	r.log(log, zapcore.WarnLevel, msg, fields...)
}

func (r *rateLimit) error(log *zap.Logger, msg string, fields ...zap.Field) {
	r.log(log, zapcore.ErrorLevel, msg, fields...)
}

func (r *rateLimit) log(log *zap.Logger, lvl zapcore.Level, msg string, fields ...zap.Field) {
	now := time.Now().UnixNano()
	next := r.next.Load()
	if now < next || !r.next.CompareAndSwap(next, now+int64(logInterval)) {
		r.suppressed.Add(1)
		return
	}
	if n := r.suppressed.Swap(0); n > 0 {
		fields = append(fields, zap.Int64("suppressed", n))
	}
	log.Log(lvl, msg, fields...)
}
