package group

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestResumeReadRetried: a claim whose read of the commit metadata fails
// reads it again (Sarama.Metadata.Retry) rather than handle again what the
// previous owner finished. Member A finishes everything but one lane and
// leaves; the broker then answers the metadata read of member B's claim
// (the second OffsetFetch: sarama's own read of the committed offset comes
// first) with COORDINATOR_LOAD_IN_PROGRESS. B must skip what A finished
// and handle the held lane only, each message once; its "claim started"
// line says how many finished offsets the metadata listed.
func TestResumeReadRetried(t *testing.T) {
	t.Parallel() // mostly waits on the broker and a retry's backoff
	const n, keys, target = 300, 10, 5
	r := newRig(t, "resume-retry", 1, n, keys)
	do, failing := r.work(0, 0).failingAt(target)
	cfg := r.config("resume-retry")
	cfg.Size, cfg.Num = 1, 4
	cfg.Retry = Retry{Backoff: time.Second, MaxBackoff: time.Second, Jitter: -1}
	cfg.Sarama.Metadata.Retry.Backoff = 50 * time.Millisecond

	a := newGroup(t, cfg, do)
	stopA := run(t, a)
	waitFor(t, time.Minute, "A to finish all but one lane", func() bool { return a.Stats().Handled >= n-n/keys })
	time.Sleep(5 * cfg.Sarama.Consumer.Offsets.AutoCommit.Interval)
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	if c := r.b.Commits(cfg.GroupID, r.topic)[0]; c.Offset != target || c.Metadata == "" {
		t.Fatalf("A's commit: got offset %d metadata %q, want offset %d with the finished set", c.Offset, c.Metadata, target)
	}

	var fetches, refused atomic.Int32
	cl := r.b.Cluster()
	cl.ControlKey(kmsg.OffsetFetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cl.KeepControl()
		if fetches.Add(1) != 2 {
			return nil, nil, false
		}
		refused.Add(1)
		resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
		resp.SetVersion(req.GetVersion())
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		if r := req.(*kmsg.OffsetFetchRequest); len(r.Groups) > 0 { // v8+: per group
			g := kmsg.NewOffsetFetchResponseGroup()
			g.Group, g.ErrorCode = r.Groups[0].Group, kerr.CoordinatorLoadInProgress.Code
			resp.Groups = append(resp.Groups, g)
		}
		return resp, nil, true
	})
	failing.Store(false)
	core, logs := observer.New(zapcore.InfoLevel)
	cfg.Logger = zap.New(core)
	b := newGroup(t, cfg, do)
	r.runToEnd(b, cfg.GroupID)
	if refused.Load() != 1 {
		t.Fatalf("refused OffsetFetch requests: got %d, want 1 (of %d)", refused.Load(), fetches.Load())
	}
	st := b.Stats()
	resumed := int64(n - n/keys - target) // what A finished above its commit
	if got, want := st.Handled, int64(n/keys); got != want || st.Resumed != resumed {
		t.Errorf("B: got Handled %d, Resumed %d; want %d (the held lane) and %d (what A finished above offset %d)", got, st.Resumed, want, resumed, target)
	}
	started := logs.FilterMessage("claim started").All()
	if len(started) != 1 || started[0].ContextMap()["finished_above"] != resumed {
		t.Errorf("B's \"claim started\" lines: got %v, want one with finished_above %d", started, resumed)
	}
	r.check(false)
}
