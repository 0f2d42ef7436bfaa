package main

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestConsumeInstanceID: `orderly consume --instance-id` joins as a static
// member. The coordinator lists it under that group.instance.id
// (`orderly group describe`, which shows it in both forms), and a
// restart with the same ID within the session timeout gets its
// partitions back as the same member: no other member ID appears.
func TestConsumeInstanceID(t *testing.T) {
	t.Parallel() // waits on the broker and child processes
	const topic, grp = "static", "static-group"
	b := newTopic(t, topic, 2)
	produceKeyed(t, b, topic, 200, 10)
	args := []string{"--brokers", b.Addrs()[0], "--topic", topic, "--group", grp, "--exec", "cat >/dev/null",
		"--size", "50", "--progress", "off", "--instance-id", "pod-0"}
	members := func() []memberView {
		t.Helper()
		return describeJSON(t, "--brokers", b.Addrs()[0], "--group", grp).Members
	}
	var first string
	for run := range 2 {
		p := startConsume(t, args...)
		p.waitCommitted(b, grp, topic)
		p.waitFor(30*time.Second, "the member to be listed", func() bool { return len(members()) == 1 })
		m := members()[0]
		if m.InstanceID != "pod-0" || len(m.Assigned[topic]) != 2 {
			t.Fatalf("run %d: got member %+v, want instance pod-0 holding both partitions", run+1, m)
		}
		if run == 0 {
			first = m.ID
		} else if m.ID != first {
			t.Fatalf("after a restart within the session timeout: got member %s, want %s again (static membership)", m.ID, first)
		}
		out, _, code := describeRun(t, "--brokers", b.Addrs()[0], "--group", grp)
		if code != exitOK || !strings.Contains(out, "(instance pod-0, client orderly-consume") {
			t.Fatalf("run %d: describe exit %d, want the member shown with its instance\n%s", run+1, code, out)
		}
		if code := p.stop(syscall.SIGTERM); code != 0 {
			t.Fatalf("run %d: exit %d, want 0\n%s", run+1, code, p.output())
		}
	}
}
