package main

import (
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestConsumeFinalCommitUnconfirmed: when the coordinator does not confirm
// the final commits at a stop, consume prints its final line and exits 1
// with a line naming the partitions, not 0 as after a confirmed drain.
// Here the coordinator answers every OffsetFetch from the stop on with
// COORDINATOR_LOAD_IN_PROGRESS, so the read-back that confirms each
// released partition's final commit cannot; the commits themselves go
// through, so the broker's offsets show what the group will go on from.
func TestConsumeFinalCommitUnconfirmed(t *testing.T) {
	t.Parallel()
	const topic = "unconfirmed"
	b := newTopic(t, topic, 2)
	produceKeyed(t, b, topic, 200, 10)
	var refusing atomic.Bool
	var refused atomic.Int64
	b.RefuseOffsetFetch(func(*kmsg.OffsetFetchRequest) bool { return refusing.Load() }, func() { refused.Add(1) })
	p := startConsume(t, "--brokers", b.Addrs()[0], "--topic", topic, "--group", "unconfirmed",
		"--exec", "cat >/dev/null", "--size", "20", "--progress", "off", "--log-level", "warn")
	p.waitCommitted(b, "unconfirmed", topic)
	refusing.Store(true)
	if code := p.stop(syscall.SIGINT); code != 1 {
		t.Fatalf("exit %d after SIGINT with the final commits unconfirmed, want 1\n%s", code, p.output())
	}
	if refused.Load() == 0 {
		t.Fatalf("no OffsetFetch refused: the test did not reach the read-back\n%s", p.output())
	}
	if got := finalFigures(t, p.stdout.String())["handled"]; got != 200 {
		t.Errorf("final line: handled %v, want 200\n%s", got, p.output())
	}
	want := "orderly: the coordinator did not confirm the final commit of 2 partitions (unconfirmed/0, unconfirmed/1)"
	if !strings.Contains(p.stderr.String(), want) {
		t.Errorf("stderr: want a line starting %q\n%s", want, p.output())
	}
}
