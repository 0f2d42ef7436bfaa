package main

import (
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/orderly-go/orderly/internal/broker"
)

// TestConsumeInstanceID: `orderly consume --instance-id` joins as a static
// member: the coordinator lists it under that group.instance.id
// (`orderly group describe` shows it in both forms). Restarted with the
// same ID within the session timeout (a static member sends no
// LeaveGroup), it takes the old member's place: one member, the same
// instance, holding both partitions, and both runs exit 0.
func TestConsumeInstanceID(t *testing.T) {
	t.Parallel() // waits on the broker and child processes
	const topic, grp = "static", "static-group"
	b := newTopic(t, topic, 2)
	args := []string{"--brokers", b.Addrs()[0], "--topic", topic, "--group", grp, "--exec", "cat >/dev/null",
		"--size", "50", "--progress", "off", "--log-level", "info", "--instance-id", "pod-0"}
	members := func() []memberView {
		t.Helper()
		return describeJSON(t, "--brokers", b.Addrs()[0], "--group", grp).Members
	}
	for run := 1; run <= 2; run++ {
		produceKeyed(t, b, topic, 100, 10)
		p := startConsume(t, args...)
		p.waitFor(30*time.Second, "its session to start", func() bool { return strings.Contains(p.stderr.String(), "session started") })
		p.waitCommitted(b, grp, topic)
		ms := members()
		if len(ms) != 1 || ms[0].InstanceID != "pod-0" || len(ms[0].Assigned[topic]) != 2 {
			t.Fatalf("run %d: got members %+v, want one, instance pod-0, holding both partitions", run, ms)
		}
		out, _, code := describeRun(t, "--brokers", b.Addrs()[0], "--group", grp)
		if code != exitOK || !strings.Contains(out, "(instance pod-0, client orderly-consume") {
			t.Fatalf("run %d: describe exit %d, want the member shown with its instance\n%s", run, code, out)
		}
		if code := p.stop(syscall.SIGTERM); code != 0 {
			t.Fatalf("run %d: exit %d, want 0\n%s", run, code, p.output())
		}
	}
}

// TestConsumeInstanceIDTwice: a second consume with the first's
// --instance-id takes its place in the group; the first, fenced, ends
// with exit 4 (exitFenced, which a supervisor can be told not to restart
// on) once the second has held the ID for two session timeouts, with one
// error naming the flag, its value and the member that holds the ID. The
// second consumes on to the end (the broker's committed offsets) and exits
// 0.
func TestConsumeInstanceIDTwice(t *testing.T) {
	t.Parallel() // waits on the broker and child processes
	const topic, grp = "twice", "twice-group"
	b := newTopic(t, topic, 2)
	args := []string{"--brokers", b.Addrs()[0], "--topic", topic, "--group", grp, "--exec", "cat >/dev/null",
		"--progress", "off", "--log-level", "info", "--instance-id", "pod-7", "--session-timeout", "6s"}
	produceKeyed(t, b, topic, 100, 10)
	first := startConsume(t, args...)
	first.waitCommitted(b, grp, topic)
	second := startConsume(t, args...)
	second.waitFor(30*time.Second, "its session to start", func() bool { return strings.Contains(second.stderr.String(), "session started") })
	if code := first.wait(45 * time.Second); code != exitFenced {
		t.Fatalf("the fenced consume: exit %d, want %d\n%s", code, exitFenced, first.output())
	}
	ms := describeJSON(t, "--brokers", b.Addrs()[0], "--group", grp).Members
	if len(ms) != 1 || ms[0].InstanceID != "pod-7" {
		t.Fatalf("members after the fence: got %+v, want one, instance pod-7", ms)
	}
	if want := "--instance-id pod-7: group: another member holds this InstanceID: \"pod-7\" is held by member " + ms[0].ID; !strings.Contains(first.stderr.String(), want) {
		t.Fatalf("the fenced consume's stderr does not say %q\n%s", want, first.output())
	}
	produceKeyed(t, b, topic, 100, 10)
	second.waitCommitted(b, grp, topic)
	if code := second.stop(syscall.SIGTERM); code != exitOK {
		t.Fatalf("the holder: exit %d, want %d\n%s", code, exitOK, second.output())
	}
}

// TestConsumeSessionTimeout: --session-timeout is the session timeout the
// member's JoinGroup asks the coordinator for, read on the broker.
func TestConsumeSessionTimeout(t *testing.T) {
	t.Parallel() // waits on the broker and a child process
	const topic, grp = "session", "session-group"
	b := newTopic(t, topic, 1)
	produceKeyed(t, b, topic, 20, 5)
	var joins sync.Map // member's session timeout (ms) -> true
	c := b.Cluster()
	c.ControlKey(kmsg.JoinGroup.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if r, ok := req.(*kmsg.JoinGroupRequest); ok && r.Group == grp {
			joins.Store(r.SessionTimeoutMillis, true)
		}
		return nil, nil, false
	})
	p := startConsume(t, "--brokers", b.Addrs()[0], "--topic", topic, "--group", grp, "--exec", "cat >/dev/null",
		"--progress", "off", "--session-timeout", "45s")
	p.waitCommitted(b, grp, topic)
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, p.output())
	}
	var got []int32
	joins.Range(func(k, _ any) bool { got = append(got, k.(int32)); return true })
	if len(got) != 1 || got[0] != 45000 {
		t.Fatalf("JoinGroup session timeouts: got %v ms, want [45000]", got)
	}
}

// TestConsumeSessionTimeoutRefused: a --session-timeout the coordinator
// refuses (above its group.max.session.timeout.ms, 20 s here) ends
// consume with exit 1 and one line naming the flag, instead of retrying
// the join forever.
func TestConsumeSessionTimeoutRefused(t *testing.T) {
	t.Parallel()
	b, err := broker.Start(broker.Config{Topics: []string{"strict"}, Partitions: 1, MaxSessionTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	r := runBin(t, nil, "consume", "--brokers", b.Addrs()[0], "--topic", "strict", "--group", "g", "--exec", "cat",
		"--progress", "off", "--log-level", "", "--session-timeout", "25s")
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	const want = "orderly: --session-timeout 25s: group: the coordinator refuses the session timeout"
	if r.code != exitError || len(lines) != 1 || !strings.HasPrefix(lines[0], want) {
		t.Fatalf("got exit %d, stderr:\n%s\nwant exit %d and one line starting %q", r.code, r.stderr, exitError, want)
	}
}
