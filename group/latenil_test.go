package group

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// TestLateNilAfterShutdownNotHandled: a call that ignores its ctx and
// returns nil only after the shutdown's drain timed out and the final
// commit went out finished nothing this member committed: the broker holds
// the frontier below it and the next owner handles it again. It is
// abandoned (Stats.Abandoned), not handled: Stats.Handled counts the two
// messages committed behind, before and after the late return, and the
// next member handles the late one.
func TestLateNilAfterShutdownNotHandled(t *testing.T) {
	t.Parallel() // mostly waits on the broker and the drain
	const late = 1
	r := newRig(t, "late-nil", 1, 3, 3) // three keys: offsets 0 and 2 do not wait behind 1
	w := r.work(0, 0)
	started, release := make(chan struct{}), make(chan struct{})
	first := true
	do := func(ctx context.Context, batch []*Message) error {
		for _, m := range batch {
			if m.Offset == late && first {
				first = false // only one worker ever runs offset 1 here
				close(started)
				<-release // ignores ctx: returns after the drain gave up on it
			}
		}
		return w.Do(ctx, batch)
	}
	cfg := r.config("late-nil")
	cfg.Size, cfg.Num, cfg.DrainTimeout = 1, 2, 200*time.Millisecond
	logger, logs := observedTee(t)
	cfg.Logger = logger
	g := newGroup(t, cfg, do)
	stop := run(t, g)
	<-started
	waitFor(t, time.Minute, "offsets 0 and 2 to be handled", func() bool { return g.Stats().Handled == 2 })
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	waitFor(t, time.Minute, "the partition's release after the drain timeout", func() bool {
		return logs.FilterMessage("partition released").Len() == 1
	})
	if c := r.b.Committed(cfg.GroupID, r.topic)[0]; c != late {
		t.Fatalf("final commit: got offset %d, want %d (below the call still in Do)", c, late)
	}
	if st := g.Stats(); st.Handled != 2 || st.Abandoned != 1 {
		t.Fatalf("before the late return: got Handled %d, Abandoned %d; want 2 and 1", st.Handled, st.Abandoned)
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if st := g.Stats(); st.Handled != 2 || st.Abandoned != 1 || st.Batches != 3 {
		t.Errorf("after Run returned, the late call's nil in: got Handled %d, Abandoned %d, Batches %d; want 2, 1 and 3 (the call did succeed)",
			st.Handled, st.Abandoned, st.Batches)
	}
	if c := r.b.Committed(cfg.GroupID, r.topic)[0]; c != late {
		t.Errorf("after the late return: got committed offset %d, want %d", c, late)
	}

	cfg.Logger = nil
	next := newGroup(t, cfg, w.Do)
	runToEnd := run(t, next)
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	if err := runToEnd(); err != nil {
		t.Fatal(err)
	}
	if got := next.Stats().Handled; got != 1 {
		t.Errorf("the next member: got Handled %d, want 1 (offset %d again)", got, late)
	}
}

// TestLateNilOnCancelNotCommitted: a call that returns nil as soon as its
// ctx is cancelled (at the drain timeout, ErrShutdown) returns once its
// claim gave up on it, and finished nothing the claim commits or counts:
// the broker holds the frontier below it, and it is Abandoned, not
// Handled, counted once. The claim's "drain timeout" log line waits until
// the late call's completion is counted (or half a second after the call
// returned, when it is not), so that the call returns inside the claim's
// release whatever the timing.
func TestLateNilOnCancelNotCommitted(t *testing.T) {
	t.Parallel() // mostly waits on the broker and the drain
	const late = 1
	r := newRig(t, "late-cancel", 1, 3, 3) // three keys: offsets 0 and 2 do not wait behind 1
	w := r.work(0, 0)
	started := make(chan struct{})
	first := true
	do := func(ctx context.Context, batch []*Message) error {
		for _, m := range batch {
			if m.Offset == late && first {
				first = false // only one worker ever runs offset 1 here
				close(started)
				<-ctx.Done() // honours its ctx, and reports success
			}
		}
		return w.Do(ctx, batch)
	}
	cfg := r.config("late-cancel")
	cfg.Size, cfg.Num, cfg.DrainTimeout = 1, 2, 200*time.Millisecond
	logger, logs := observedTee(t)
	var g *Group[*Message]
	cfg.Logger = logger.WithOptions(zap.Hooks(func(e zapcore.Entry) error {
		if !strings.HasPrefix(e.Message, "drain timeout") {
			return nil
		}
		// Not waitFor: a Fatal here, on the claim's goroutine, would end
		// it mid-revoke and hang the test rather than fail it.
		for wait := time.Now().Add(time.Minute); g.Stats().Batches < 3; time.Sleep(time.Millisecond) {
			if time.Now().After(wait) {
				t.Errorf("the late call did not return within a minute")
				return nil
			}
		}
		deadline := time.Now().Add(500 * time.Millisecond)
		for g.Stats().Handled < 3 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		return nil
	}))
	g = newGroup(t, cfg, do)
	stop := run(t, g)
	<-started
	waitFor(t, time.Minute, "offsets 0 and 2 to be handled", func() bool { return g.Stats().Handled == 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if c := r.b.Committed(cfg.GroupID, r.topic)[0]; c != late {
		t.Errorf("final commit: got offset %d, want %d (below the call the drain gave up on)", c, late)
	}
	if st := g.Stats(); st.Handled != 2 || st.Abandoned != 1 || st.Batches != 3 {
		t.Errorf("got Handled %d, Abandoned %d, Batches %d; want 2, 1 and 3 (each message counted once)", st.Handled, st.Abandoned, st.Batches)
	}
	if e := logs.FilterMessage("partition released").All(); len(e) != 1 || e[0].ContextMap()["late"] != int64(1) {
		t.Errorf("release log: got %v, want one with late 1", e)
	}
}

// TestOrphanedCallNeitherWaitedForNorCounted: with Unordered, a call that
// hangs past MsgTimeout and its grace is given up on and its message runs
// again in a copy, which is handled and committed. The hung call is then
// nothing to its partition: a revoke (here the stop) does not wait for it,
// nor count its message late, and its return, before or after the
// revoke, counts for nothing (past MsgTimeout it failed, whatever it
// returned): each message is Handled once.
func TestOrphanedCallNeitherWaitedForNorCounted(t *testing.T) {
	t.Parallel() // mostly waits out MsgTimeout and its grace
	const n, target = 40, 7
	for _, tt := range []struct {
		name         string
		returnsFirst bool // the hung call returns before the stop, else after the partition's release
	}{
		{"hung call returns after the release", false},
		{"hung call returns before the stop", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			name := "orphan-drain-" + strings.ReplaceAll(tt.name, " ", "-")
			r := newRig(t, name, 1, n, n)
			w := r.work(0, 0)
			release := make(chan struct{})
			var closeRelease sync.Once
			t.Cleanup(func() { closeRelease.Do(func() { close(release) }) })
			var attempts attemptLog
			cfg := r.config(name)
			cfg.Size, cfg.Num, cfg.Ordering = 1, 4, Unordered
			cfg.MsgTimeout, cfg.DrainTimeout = 200*time.Millisecond, 5*time.Second // given up on after MsgTimeout and its grace (1 s)
			logger, logs := observedTee(t)
			cfg.Logger = logger
			g := newGroup(t, cfg, hangOnFirstAttempt(target, release, &attempts, w.Do))
			stop := run(t, g)
			waitFor(t, time.Minute, "the copy of the hung call's message, and everything, to be committed", func() bool {
				return g.Stats().Redelivered == 1 && r.b.CaughtUp(cfg.GroupID, r.topic)
			})
			if tt.returnsFirst {
				closeRelease.Do(func() { close(release) })
				waitFor(t, time.Minute, "the hung call to return", func() bool { return g.Stats().Failures == 1 })
			}
			stopped := make(chan error, 1)
			go func() { stopped <- stop() }()
			waitFor(t, time.Minute, "the partition's release", func() bool {
				return logs.FilterMessage("partition released").Len() == 1
			})
			closeRelease.Do(func() { close(release) })
			if err := <-stopped; err != nil {
				t.Fatal(err)
			}
			if got := logs.FilterMessageSnippet("drain timeout").Len(); got != 0 {
				t.Errorf("drain timeout log lines: got %d, want 0 (the drain does not wait for the hung call)", got)
			}
			if e := logs.FilterMessage("partition released").All()[0].ContextMap(); e["late"] != int64(0) || e["abandoned"] != int64(0) {
				t.Errorf("release log: got late %v, abandoned %v; want 0 and 0", e["late"], e["abandoned"])
			}
			if st := g.Stats(); st.Handled != n || st.Abandoned != 0 || st.Failures != 1 {
				t.Errorf("got Handled %d, Abandoned %d, Failures %d; want %d, 0 and 1 (the hung call, past MsgTimeout, failed: its copy counts)",
					st.Handled, st.Abandoned, st.Failures, n)
			}
			if seen, _ := attempts.get(); len(seen) != 2 || seen[1] != 2 {
				t.Errorf("attempts of offset %d: got %v, want [1 2]", target, seen)
			}
		})
	}
}
