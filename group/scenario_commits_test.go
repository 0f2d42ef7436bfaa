package group

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Reliability scenario 5: the broker answers OffsetCommit with an error,
// once or for a while, never answers it, or drops its connection. sarama
// retries a refused commit at the next interval; a commit never answered
// holds the coordinator connection (heartbeats and fetches with it) until
// Net.ReadTimeout closes it. Whatever happens, no commit may pass
// unfinished work, nothing is lost, and since no member ends uncleanly
// nothing is handled twice; the commits reach the high watermarks once the
// fault is gone.
func TestScenario05CommitErrors(t *testing.T) {
	type inject func(t *testing.T, c *kfake.Cluster, group string) (hits func() int, remove func())
	fault := func(code *kerr.Error, count int) inject {
		return func(t *testing.T, c *kfake.Cluster, group string) (func() int, func()) {
			h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: group, Err: code, Count: count})
			return h.Hits, h.Remove
		}
	}
	// control answers the first count OffsetCommit requests with fn's
	// (nil, err, true): no answer at all (err nil) or a dropped connection.
	control := func(err error, count int64) inject {
		return func(t *testing.T, c *kfake.Cluster, group string) (func() int, func()) {
			var n atomic.Int64
			c.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
				if n.Add(1) > count {
					return nil, nil, false // the fault is over (the control is dropped once it handles nothing)
				}
				c.KeepControl()
				return nil, err, true
			})
			return func() int { return int(min(n.Load(), count)) }, func() {}
		}
	}
	type tc struct {
		name   string
		inject inject
		for_   time.Duration // how long a repeated fault lasts
	}
	var tests []tc
	for _, code := range []*kerr.Error{kerr.IllegalGeneration, kerr.UnknownMemberID, kerr.RebalanceInProgress, kerr.NotCoordinator, kerr.CoordinatorLoadInProgress} {
		tests = append(tests,
			tc{name: code.Message + " once", inject: fault(code, 1)},
			tc{name: code.Message + " for 2s", inject: fault(code, -1), for_: 2 * time.Second})
	}
	tests = append(tests,
		tc{name: "never answered", inject: control(nil, 1)},
		tc{name: "connection dropped, 3 times", inject: control(errors.New("connection dropped by the test"), 3)})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			const partitions, n, keys = 2, 3000, 60
			r, o := oracleRig(t, "5 OffsetCommit "+tt.name, "commit-errors", partitions, n, keys)
			produced := r.produceAtRate(2000)
			cfg := r.config("commit-errors")
			cfg.Size, cfg.Num = 4, 2
			cfg.Sarama.Net.ReadTimeout = 3 * time.Second // a request never answered: the connection is closed after this
			m := &member{tag: "m", o: o, delay: time.Millisecond}
			stop := m.start(t, cfg)
			waitFor(t, 30*time.Second, "the first commits", func() bool { return len(r.b.Committed(cfg.GroupID, r.topic)) > 0 })
			hits, remove := tt.inject(t, r.b.Cluster(), cfg.GroupID)
			injected := time.Now()
			waitFor(t, 30*time.Second, "the fault to hit a commit", func() bool { return hits() > 0 })
			if tt.for_ > 0 {
				time.Sleep(tt.for_)
			}
			remove()
			produced()
			r.finalCheck(o, cfg.GroupID, time.Minute, want{all: true})
			st := m.g.Load().Stats()
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d commits hit by the fault; all committed %v after it was injected; errors by cause %+v", hits(),
				time.Since(injected).Round(100*time.Millisecond), st.ErrorsBy)
		})
	}
}
