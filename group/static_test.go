package group

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"
)

// assignmentOf returns the partitions of topic the coordinator assigned to
// the member with instanceID, and the group's generation.
func assignmentOf(c *kfake.Cluster, group, topic, instanceID string) (parts []int32, gen int32, ok bool) {
	gi := c.GroupInfo(group)
	if gi == nil {
		return nil, 0, false
	}
	for _, m := range gi.Members {
		if m.InstanceID != nil && *m.InstanceID == instanceID {
			parts = slices.Clone(m.Assignment[topic])
			slices.Sort(parts)
			return parts, gi.Epoch, gi.State == "Stable"
		}
	}
	return nil, gi.Epoch, false
}

// TestStaticMembershipRestart: two static members (Config.InstanceID, the
// range strategy, whose subscription does not change across restarts).
// One stops gracefully and a new Group with its InstanceID starts within
// the session timeout: it gets the same partitions back in the same
// generation (no rebalance: the coordinator's group info says so), the
// other member never lets go of anything, and nothing is handled twice.
// Then it stops for good: a static member sends no LeaveGroup, so its
// partitions move to the other member only once the session timeout has
// passed.
func TestStaticMembershipRestart(t *testing.T) {
	t.Parallel() // mostly waits (on the broker, timers or child processes): runs beside the others
	const partitions, n, keys = 4, 20_000, 200
	r, o := oracleRig(t, "static membership restart", "static", partitions, n, keys)
	produced := r.produceAtRate(2000)
	cfg := r.config("static")
	cfg.Sarama.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
	cfg.Size, cfg.Num = 8, 2
	cluster := r.b.Cluster()
	cfgA, cfgB := cfg, cfg
	cfgA.InstanceID, cfgB.InstanceID = "pod-a", "pod-b"
	a, b := &member{tag: "a1", o: o, delay: time.Millisecond}, &member{tag: "b", o: o, delay: time.Millisecond}
	stopA := a.start(t, cfgA)
	stopB := b.start(t, cfgB)
	var partsA []int32
	var gen int32
	waitFor(t, 30*time.Second, "both members assigned partitions in a stable group", func() bool {
		pa, g1, okA := assignmentOf(cluster, cfg.GroupID, r.topic, "pod-a")
		pb, _, okB := assignmentOf(cluster, cfg.GroupID, r.topic, "pod-b")
		partsA, gen = pa, g1
		return okA && okB && len(pa) > 0 && len(pb) > 0 && a.g.Load().Stats().Partitions == int64(len(pa)) &&
			b.g.Load().Stats().Partitions == int64(len(pb))
	})
	waitFor(t, 30*time.Second, "both members to handle messages", func() bool { return a.n.Load() > 0 && b.n.Load() > 0 })
	revokesB := b.g.Load().Stats().Revokes
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	a2 := &member{tag: "a2", o: o, delay: time.Millisecond}
	stopA2 := a2.start(t, cfgA)
	waitFor(t, 30*time.Second, "the restarted member to claim its partitions", func() bool {
		return a2.g.Load().Stats().Partitions == int64(len(partsA)) && a2.n.Load() > 0
	})
	back := time.Since(restarted)
	pa2, gen2, ok := assignmentOf(cluster, cfg.GroupID, r.topic, "pod-a")
	if !ok || !slices.Equal(pa2, partsA) || gen2 != gen {
		t.Fatalf("after the restart: pod-a holds %v in generation %d (stable %v), want %v in generation %d (no rebalance)", pa2, gen2, ok, partsA, gen)
	}
	if got := b.g.Load().Stats().Revokes; got != revokesB {
		t.Fatalf("the other member let go of %d partitions during the restart, want 0", got-revokesB)
	}
	// Gone for good: no LeaveGroup, so the partitions wait for the session
	// timeout.
	if err := stopA2(); err != nil {
		t.Fatal(err)
	}
	gone := time.Now()
	waitFor(t, 30*time.Second, "the other member to take every partition", func() bool {
		return b.g.Load().Stats().Partitions == partitions
	})
	moved := time.Since(gone)
	if session := cfg.Sarama.Consumer.Group.Session.Timeout; moved < session-time.Second {
		t.Errorf("a stopped static member's partitions moved after %v, before the session timeout %v: did it leave the group?", moved, session)
	}
	produced()
	r.finalCheck(o, cfg.GroupID, time.Minute, want{all: true})
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted within the session timeout: partitions %v back after %v in generation %d; stopped for good: taken over after %v (session timeout %v)",
		partsA, back.Round(time.Millisecond), gen, moved.Round(time.Millisecond), cfg.Sarama.Consumer.Group.Session.Timeout)
}

// TestInstanceFenced: a second Group with the first's InstanceID takes
// its place, and the coordinator fences the first (FENCED_INSTANCE_ID),
// whose every join sarama then makes with its replaced member ID.
//
//   - The second stays: the first's Run ends with ErrInstanceFenced, two
//     session timeouts after it was fenced (not sooner: a member that is
//     gone expires within one), naming the member that holds the ID as
//     the coordinator lists it; before, it joined again for good. The
//     holder, asking who holds its InstanceID, finds no other member.
//   - The second stops (a static member sends no LeaveGroup): once the
//     coordinator expires it, the first takes the ID back at its next
//     join and consumes on; its Run does not end.
//
// Either way the member left consumes to the end: nothing lost, per-key
// order kept (the fenced member's unfinished work may repeat), the
// broker's committed offsets at the high watermarks.
func TestInstanceFenced(t *testing.T) {
	for _, holderStays := range []bool{true, false} {
		t.Run(fmt.Sprintf("holderStays=%v", holderStays), func(t *testing.T) {
			t.Parallel() // mostly waits on the broker and the session timeout
			testInstanceFenced(t, holderStays)
		})
	}
}

func testInstanceFenced(t *testing.T, holderStays bool) {
	const partitions, n, keys = 4, 4000, 100
	r := newRig(t, "fenced", partitions, n, keys)
	r.refusedCommits = true // the fenced member's last commits
	cfg := r.config("fenced")
	cfg.InstanceID = "pod-x"
	cfg.Size, cfg.Num = 8, 2
	wa, wb := r.work(2*time.Millisecond, 0), r.work(2*time.Millisecond, 0)
	wa.tag, wb.tag = "a", "b"
	a := newGroup(t, cfg, wa.Do)
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	doneA := make(chan error, 1)
	go func() { doneA <- a.Run(ctxA) }()
	waitFor(t, 30*time.Second, "the first member to consume", func() bool {
		return a.Stats().Partitions == partitions && a.Stats().Handled > 0
	})
	b := newGroup(t, cfg, wb.Do)
	stopB := run(t, b)
	var holder string
	waitFor(t, 30*time.Second, "the second member to hold the InstanceID", func() bool {
		gi := r.b.Cluster().GroupInfo(cfg.GroupID)
		if gi == nil {
			return false
		}
		for _, m := range gi.Members {
			if m.InstanceID != nil && *m.InstanceID == cfg.InstanceID {
				holder = m.MemberID
			}
		}
		p := b.memberID.Load()
		return p != nil && *p == holder
	})
	fenced := time.Now()
	wait := fenceWait(cfg.Sarama)
	if !holderStays {
		if err := stopB(); err != nil {
			t.Fatalf("the holder's Run: %v", err)
		}
		select {
		case err := <-doneA:
			t.Fatalf("the fenced member's Run returned %v after its holder stopped, want it to take the InstanceID back", err)
		case <-time.After(wait + 5*time.Second):
		}
		waitFor(t, 30*time.Second, "the first member to take its partitions back", func() bool {
			return a.Stats().Partitions == partitions && a.Ready()
		})
		r.waitAllCommitted(cfg.GroupID, time.Minute)
		cancelA()
		if err := <-doneA; err != nil {
			t.Fatalf("the first member's Run: %v", err)
		}
		r.check(true)
		r.checkFinalCommits(cfg.GroupID)
		return
	}
	select {
	case err := <-doneA:
		took := time.Since(fenced)
		if !errors.Is(err, ErrInstanceFenced) || !strings.Contains(err.Error(), holder) || !strings.Contains(err.Error(), `"pod-x"`) {
			t.Fatalf("the fenced member's Run returned %v, want ErrInstanceFenced naming %q and member %s", err, cfg.InstanceID, holder)
		}
		if took < wait-time.Second {
			t.Fatalf("the fenced member's Run ended %v after the fence, want no sooner than %v (twice the session timeout)", took, wait)
		}
		t.Logf("the fenced member's Run, %v after the fence: %v", took.Round(time.Millisecond), err)
	case <-time.After(wait + 30*time.Second):
		t.Fatalf("the fenced member's Run still runs %v after member %s took its InstanceID (errors %+v)", wait+30*time.Second, holder, a.Stats().Errors)
	}
	if h, err := b.instanceHolder(b.client); h != nil || err != nil {
		t.Errorf("the holder asking who else holds its InstanceID: got %+v, %v; want none, no error", h, err)
	}
	r.waitAllCommitted(cfg.GroupID, time.Minute)
	if err := stopB(); err != nil {
		t.Fatalf("the holder's Run: %v", err)
	}
	r.check(true)
	r.checkFinalCommits(cfg.GroupID)
}
