package group

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/orderly-go/orderly/internal/broker"
)

func allow(res kmsg.ACLResourceType, name string, op kmsg.ACLOperation) kfake.ACL {
	return kfake.ACL{Resource: res, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
}

// TestRunEndsOnErrorsItCannotGetPast: a refused SASL login, a group or
// topic an ACL denies, a topic that does not exist, and a session timeout
// the coordinator refuses end Run with the
// matching sentinel (after sarama's own retries) instead of retrying
// forever; with the right credentials and ACLs the same cluster serves.
func TestRunEndsOnErrorsItCannotGetPast(t *testing.T) {
	const topic, groupID = "guarded", "guarded-group"
	readTopic := allow(kmsg.ACLResourceTypeTopic, topic, kmsg.ACLOperationRead)
	readGroup := allow(kmsg.ACLResourceTypeGroup, groupID, kmsg.ACLOperationRead)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic), kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", "admin"),
		kfake.User("PLAIN", "alice", "alice-secret", readTopic, readGroup),
		kfake.User("PLAIN", "nogroup", "pw", readTopic),
		kfake.User("PLAIN", "notopic", "pw", readGroup))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// kfake drops the connection on a bad password; Kafka answers
	// SASL_AUTHENTICATION_FAILED first (KIP-152), which is what clients
	// see. Answer like Kafka.
	c.ControlKey(kmsg.SASLAuthenticate.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.SASLAuthenticateRequest)
		if parts := bytes.Split(r.SASLAuthBytes, []byte{0}); len(parts) == 3 && string(parts[2]) == "wrong" {
			resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
			resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
			msg := "Authentication failed: Invalid username or password"
			resp.ErrorMessage = &msg
			return resp, nil, true
		}
		return nil, nil, false
	})
	plain := startBroker(t, topic, 2) // no SASL, no ACLs: a missing topic is just missing
	for _, tt := range []struct {
		name, user, pass, topic string
		session                 time.Duration // the group's session timeout; 0: fastConfig's
		dlq                     string        // DeadLetterTopic
		want                    error
	}{
		{"wrong password", "alice", "wrong", topic, 0, "", ErrAuth},
		{"group not authorized", "nogroup", "pw", topic, 0, "", ErrNotAuthorized},
		{"topic not authorized", "notopic", "pw", topic, 0, "", ErrNotAuthorized},
		{"unknown topic", "", "", "no-such-topic", 0, "", ErrUnknownTopic},
		{"unknown dead-letter topic", "", "", topic, 0, "no-such-dlq", ErrDeadLetterTopic},
		{"session timeout above the brokers' maximum", "", "", topic, 31 * time.Minute, "", ErrSessionTimeout}, // 30m: see broker.Config
		{"allowed", "alice", "alice-secret", topic, 0, "", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := fastConfig(t, c.ListenAddrs(), tt.topic, groupID)
			if tt.user == "" {
				cfg.Brokers = plain.Addrs()
			} else {
				cfg.Sarama.Net.SASL.Enable = true
				cfg.Sarama.Net.SASL.Mechanism = sarama.SASLTypePlaintext
				cfg.Sarama.Net.SASL.User, cfg.Sarama.Net.SASL.Password = tt.user, tt.pass
			}
			if tt.session > 0 {
				cfg.Sarama.Consumer.Group.Session.Timeout = tt.session
			}
			cfg.DeadLetterTopic = tt.dlq
			cfg.Sarama.Metadata.Retry.Backoff = 50 * time.Millisecond
			cfg.Sarama.Consumer.Group.Rebalance.Retry.Backoff = 100 * time.Millisecond
			g := newGroup(t, cfg, func(context.Context, []*Message) error { return nil })
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- g.Run(ctx) }()
			if tt.want == nil {
				waitFor(t, 15*time.Second, "the allowed member to claim its partitions", func() bool { return g.Stats().Partitions == 2 })
				cancel()
				if err := <-done; err != nil {
					t.Fatalf("Run with the right credentials: got %v, want nil", err)
				}
				return
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(15 * time.Second):
				t.Fatalf("Run still running after 15s, want it to end with %v", tt.want)
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Run: got %v, want an error wrapping %v", err, tt.want)
			}
			if ctx.Err() != nil {
				t.Fatal("Run returned only because its ctx ended")
			}
			st := g.Stats()
			if st.Errors == 0 || st.ErrorsBy.Auth+st.ErrorsBy.Topic+st.ErrorsBy.Other == 0 {
				t.Fatalf("Stats errors: got %d (%+v), want the cause counted", st.Errors, st.ErrorsBy)
			}
			t.Logf("Run: %v", err)
		})
	}
}

// TestRunNamesMissingTopics: a topic that does not exist ends Run with an
// *UnknownTopicError that names each missing topic once, in the order of
// Config.Topics, leaves out those that exist, and says "not exist" once,
// wrapping ErrUnknownTopic (and ErrDeadLetterTopic for the dead-letter
// topic) and sarama's error.
func TestRunNamesMissingTopics(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "present", 1)
	for _, tt := range []struct {
		name       string
		topics     []string
		dlq        string
		missing    []string
		deadLetter bool
		msg        string
	}{
		{"one missing", []string{"absent"}, "", []string{"absent"}, false,
			`group: topic "absent" does not exist (group "g")`},
		{"two of three missing", []string{"absent", "present", "other"}, "", []string{"absent", "other"}, false,
			`group: topics "absent", "other" do not exist (group "g")`},
		{"dead-letter topic missing", []string{"present"}, "absent-dlq", []string{"absent-dlq"}, true,
			`group: dead-letter topic "absent-dlq" does not exist (group "g")`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := fastConfig(t, b.Addrs(), "", "g")
			cfg.Topics, cfg.DeadLetterTopic = tt.topics, tt.dlq
			cfg.Sarama.Metadata.Retry.Backoff = 50 * time.Millisecond
			g := newGroup(t, cfg, func(context.Context, []*Message) error { return nil })
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := g.Run(ctx)
			var unknown *UnknownTopicError
			if !errors.As(err, &unknown) {
				t.Fatalf("Run: got %v, want an *UnknownTopicError", err)
			}
			if !slices.Equal(unknown.Topics, tt.missing) || unknown.DeadLetter != tt.deadLetter {
				t.Errorf("UnknownTopicError: got Topics %q, DeadLetter %t, want %q, %t", unknown.Topics, unknown.DeadLetter, tt.missing, tt.deadLetter)
			}
			if err.Error() != tt.msg {
				t.Errorf("Run: got error %q, want %q", err, tt.msg)
			}
			if !errors.Is(err, ErrUnknownTopic) || errors.Is(err, ErrDeadLetterTopic) != tt.deadLetter || !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
				t.Errorf("Run: got %v wrapping ErrUnknownTopic %t, ErrDeadLetterTopic %t, sarama.ErrUnknownTopicOrPartition %t; want true, %t, true",
					err, errors.Is(err, ErrUnknownTopic), errors.Is(err, ErrDeadLetterTopic), errors.Is(err, sarama.ErrUnknownTopicOrPartition), tt.deadLetter)
			}
		})
	}
}

// TestRunSurvivesBrokerRestart: a broker that goes away and comes back on
// the same address and data is transient: Run keeps going and catches up.
// Meanwhile the member is out of the group: not Ready (so /readyz is 503)
// until it joins again, and Live all along (a restart would not bring the
// broker back).
func TestRunSurvivesBrokerRestart(t *testing.T) {
	const topic = "restart"
	dir := filepath.Join(t.TempDir(), "data")
	b, err := broker.Start(broker.Config{Addr: "127.0.0.1:0", DataDir: dir, Topics: []string{topic}, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	addr := b.Addrs()[0]
	produceSeq(t, b, topic, 2000, 20)
	cfg := fastConfig(t, []string{addr}, topic, "restart")
	g := newGroup(t, cfg, func(context.Context, []*Message) error { return nil })
	stop := run(t, g)
	waitFor(t, time.Minute, "the first 2000 to be committed", func() bool { return b.CaughtUp("restart", topic) })
	if !g.Ready() {
		t.Fatal("Ready after catching up: got false, want true")
	}
	b.Close()
	waitFor(t, time.Minute, "Ready to turn false with the broker gone", func() bool { return !g.Ready() })
	if ready, why := g.Readiness(); ready || !strings.HasPrefix(why, "out of the group") && !strings.HasPrefix(why, "group session lost") {
		t.Fatalf("Readiness with the broker gone: got %v %q, want false, out of the group or its session lost", ready, why)
	}
	if ok, why := g.Live(); !ok {
		t.Fatalf("Live with the broker gone: got false (%s), want true", why)
	}
	b, err = broker.Start(broker.Config{Addr: addr, DataDir: dir, Topics: []string{topic}, Partitions: 2})
	if err != nil {
		t.Fatalf("restart the broker on %s: %v", addr, err)
	}
	t.Cleanup(b.Close)
	produceSeq(t, b, topic, 2000, 20)
	waitFor(t, time.Minute, "the group to catch up after the restart", func() bool {
		hw := b.HighWatermarks(topic)
		return hw[0]+hw[1] == 4000 && b.CaughtUp("restart", topic)
	})
	if !g.Ready() {
		t.Fatal("Ready after the group caught up on the restarted broker: got false, want true")
	}
	if err := stop(); err != nil {
		t.Fatalf("Run after a broker restart: got %v, want nil", err)
	}
	if st := g.Stats(); st.Errors == 0 {
		t.Log("no error counted across the restart")
	} else {
		t.Logf("errors across the restart: %d (%+v)", st.Errors, st.ErrorsBy)
	}
}
