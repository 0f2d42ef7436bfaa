package main

import (
	"context"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// rangeMember joins group with franz-go's range balancer (what a
// consumer of another client offers) and polls without committing; held
// is how many partitions of topic it holds now; leave closes it
// (LeaveGroup).
func rangeMember(t *testing.T, addrs []string, group, topic string) (held func() int, leave func()) {
	t.Helper()
	var n atomic.Int32
	count := func(d int32) func(context.Context, *kgo.Client, map[string][]int32) {
		return func(_ context.Context, _ *kgo.Client, a map[string][]int32) { n.Add(d * int32(len(a[topic]))) }
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.Balancers(kgo.RangeBalancer()), kgo.DisableAutoCommit(), kgo.SessionTimeout(6*time.Second),
		kgo.OnPartitionsAssigned(count(1)), kgo.OnPartitionsRevoked(count(-1)), kgo.OnPartitionsLost(count(-1)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	}()
	var once atomic.Bool
	leave = func() {
		if once.CompareAndSwap(false, true) {
			cancel()
			<-polled
			cl.Close()
		}
	}
	t.Cleanup(leave)
	return func() int { return int(n.Load()) }, leave
}

// TestConsumeAssignmentStrategy: `orderly consume` joining a group whose
// member offers range. With the default (cooperative-sticky alone) it
// cannot join, says so on stderr naming its strategies, and joins once
// the other member leaves; with --assignment-strategy
// cooperative-sticky,range it joins beside the other member at once (the
// other gives up partitions). Either way it then commits every record.
func TestConsumeAssignmentStrategy(t *testing.T) {
	t.Parallel() // waits on the broker and a child process
	const parts = 4
	tests := []struct {
		name   string
		args   []string
		shares bool
	}{
		{"default", nil, false},
		{"with range", []string{"--assignment-strategy", "cooperative-sticky,range"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			const topic, group = "migrating", "migrating-group"
			b := newTopic(t, topic, parts)
			produceKeyed(t, b, topic, 2000, 40)
			held, leave := rangeMember(t, b.Addrs(), group, topic)
			deadline := time.Now().Add(30 * time.Second)
			for held() != parts {
				if time.Now().After(deadline) {
					t.Fatalf("the range member holds %d partitions after 30s, want %d", held(), parts)
				}
				time.Sleep(20 * time.Millisecond)
			}
			p := startConsume(t, append([]string{"--brokers", b.Addrs()[0], "--topic", topic, "--group", group,
				"--exec", "cat >/dev/null", "--size", "50", "--progress", "off", "--backoff", "100ms", "--max-backoff", "400ms"}, tt.args...)...)
			if tt.shares {
				p.waitFor(30*time.Second, "the range member to give up partitions", func() bool { return held() > 0 && held() < parts })
			} else {
				const cannot = "cannot join: the group's members use other assignment strategies"
				p.waitFor(30*time.Second, "a warning that it cannot join", func() bool {
					return strings.Contains(p.stderr.String(), cannot) && strings.Contains(p.stderr.String(), `"strategies": ["cooperative-sticky"]`)
				})
				if held() != parts {
					t.Fatalf("while consume cannot join: the range member holds %d partitions, want %d", held(), parts)
				}
			}
			leave()
			p.waitCommitted(b, group, topic)
			if code := p.stop(syscall.SIGTERM); code != 0 {
				t.Fatalf("exit %d, want 0\n%s", code, p.output())
			}
			if got := finalFigures(t, p.stdout.String())["handled"]; got < 2000 {
				t.Fatalf("handled %v, want at least 2000\n%s", got, p.output())
			}
		})
	}
}
