package main

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

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
			other, err := b.JoinRange(group, topic)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(other.Leave)
			held, leave := other.Held, other.Leave
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
